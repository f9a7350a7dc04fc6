// Each client stage alone: a ClientCall built by hand, the next stage a plain function.
import { create, toBinary } from "@bufbuild/protobuf";
import { Metadata, type ClientUnaryCall } from "@grpc/grpc-js";
import {
  BillingService,
  RefundReason,
  RefundRequestSchema,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService, SearchRequestSchema, SearchResponseSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it, vi } from "vitest";
import { metricValue } from "../../testing/index.js";
import { methodPolicy } from "../contract.js";
import { status } from "../errors.js";
import { AVOID_HEADER, PREFER_NOT_HEADER } from "./avoiding-round-robin.js";
import { CallError } from "./call-error.js";
import { callTarget, type ClientCall, type ClientCallFn, composeClient, newCall } from "./chain.js";
import { ClientMetrics } from "./client-metrics.js";
import { LatencyWindow, SlowReplicas } from "./hedge.js";
import { ResponseCache } from "./response-cache.js";
import { RetryBudget } from "./retry.js";
import { breakerStage, ToolBreaker } from "./stages/breaker.js";
import { cacheStage } from "./stages/cache.js";
import { credentialsStage } from "./stages/credentials.js";
import { deadlineStage } from "./stages/deadline.js";
import { hedgeStage } from "./stages/hedge.js";
import { callMetricsStage } from "./stages/metrics.js";
import { retryStage } from "./stages/retry.js";
import { answerTooLarge, metadataFor } from "./stages/transport.js";
import { requestValidationStage, responseValidationStage } from "./stages/validation.js";

const search = KbSearchService.method.search;
const refund = BillingService.method.refund;
const hit = { docId: "returns", version: 2, title: "Returns" };
const kbTarget = callTarget("kb-search", search, new Set(["INDEX_UNAVAILABLE"]));

function searchCall(query = "refund", options: ClientCall["options"] = {}): ClientCall {
  return newCall({ target: kbTarget, request: create(SearchRequestSchema, { query, limit: 3 }), options });
}

function refundCall(idempotencyKey: string, deadline?: number): ClientCall {
  const request = create(RefundRequestSchema, {
    orderId: "ord_DEMO00000001",
    amountCents: 500n,
    reason: RefundReason.DAMAGED,
    idempotencyKey,
  });
  return newCall({ target: callTarget("billing", refund, new Set()), request, deadline });
}

const failure = (code: status, reason?: string, extra: Partial<CallError> = {}) =>
  new CallError({
    code,
    reason,
    message: reason ?? status[code],
    attempts: 1,
    tool: "kb-search",
    method: "Search",
    ...extra,
  });

async function rejection(promise: Promise<unknown>): Promise<CallError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(CallError);
    return error as CallError;
  }
  return expect.fail("the call was answered");
}

/** A next stage that answers from a script, one entry per attempt, counting attempts as the transport does. */
function scripted(...outcomes: (CallError | object)[]): ClientCallFn & { calls: number } {
  const fn = async (call: ClientCall) => {
    call.attempt.number = ++call.sent.attempts;
    const outcome = outcomes[fn.calls++ % outcomes.length];
    if (outcome instanceof CallError) throw outcome;
    return outcome;
  };
  fn.calls = 0;
  return fn;
}

const metrics = () => new ClientMetrics(new Registry());

describe("composeClient", () => {
  it("runs the first interceptor outermost", async () => {
    const seen: string[] = [];
    const tag = (name: string) => (next: ClientCallFn) => async (call: ClientCall) => {
      seen.push(`${name} in`);
      const response = await next(call);
      seen.push(`${name} out`);
      return response;
    };
    await composeClient([tag("a"), tag("b")], scripted({}))(searchCall());
    expect(seen).toEqual(["a in", "b in", "b out", "a out"]);
  });
});

describe("validation stages", () => {
  it("never sends a request that breaks its contract: INVALID_ARGUMENT, CLIENT_VALIDATION_FAILED, no attempt", async () => {
    const next = scripted({});
    const error = await rejection(requestValidationStage(next)(searchCall("")));
    expect([error.code, error.reason, error.attempts, next.calls]).toEqual([
      status.INVALID_ARGUMENT,
      "CLIENT_VALIDATION_FAILED",
      0,
      0,
    ]);
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["query"]);
  });

  it("withholds an answer that breaks its contract: INTERNAL, CONTRACT_VIOLATION", async () => {
    const broken = create(SearchResponseSchema, { hits: [{ ...hit, docId: "" }] });
    const error = await rejection(responseValidationStage(scripted(broken))(searchCall()));
    expect([error.code, error.reason]).toEqual([status.INTERNAL, "CONTRACT_VIOLATION"]);
    const good = create(SearchResponseSchema, { hits: [hit] });
    await expect(responseValidationStage(scripted(good))(searchCall())).resolves.toBe(good);
  });
});

describe("deadlineStage", () => {
  it("gives the call the tighter of the SLA timeout and the caller's deadline", async () => {
    const seen = async (call: ClientCall) => call.deadline;
    const now = Date.now();
    const own = await deadlineStage(200, 100)(seen)(searchCall());
    expect((own as number) - now).toBeGreaterThanOrEqual(200);
    expect((own as number) - now).toBeLessThan(1000);
    const tight = refundCall("k-1", now + 50);
    await expect(deadlineStage(200, 100)(seen)(tight)).resolves.toBe(now + 50);
  });

  it("marks a call cut short only when its caller left it less than the time its timeout counts from", async () => {
    const cutShort = async (deadline: number | undefined) => {
      const call = refundCall("k-1", deadline);
      await deadlineStage(1000, 300)(async () => undefined)(call);
      return call.cutShort;
    };
    const now = Date.now();
    expect(await cutShort(undefined)).toBe(false);
    expect(await cutShort(now + 5_000)).toBe(false);
    // The SLA timeout as the caller's own deadline, read from the clock a little before the call.
    expect(await cutShort(now + 990)).toBe(false);
    expect(await cutShort(now + 5)).toBe(true);
  });
});

describe("credentialsStage", () => {
  it("sends the client's token unless the call brings its own", async () => {
    const seen = async (call: ClientCall) => call.token;
    await expect(credentialsStage(async () => "client-token")(seen)(searchCall())).resolves.toBe("client-token");
    const own = searchCall();
    own.token = "session-token";
    await expect(credentialsStage("client-token")(seen)(own)).resolves.toBe("session-token");
  });
});

describe("breakerStage", () => {
  const options = { volumeThreshold: 2, errorThresholdPercentage: 50, resetTimeoutMs: 60_000 };

  it("opens on the tool's failures and then refuses UNAVAILABLE, BREAKER_OPEN, with when it lets a probe through", async () => {
    const breaker = new ToolBreaker("kb-search", options, metrics());
    const stage = breakerStage(breaker)(scripted(failure(status.UNAVAILABLE)));
    for (let i = 0; i < 2; i++) await rejection(stage(searchCall()));
    expect(breaker.state).toBe("open");
    const error = await rejection(stage(searchCall()));
    expect([error.code, error.reason, error.attempts]).toEqual([status.UNAVAILABLE, "BREAKER_OPEN", 0]);
    expect(error.retryAfterMs).toBeGreaterThan(59_000);
    breaker.shutdown();
  });

  it("is never tripped by a caller's mistake nor by a hedge race's cancelled loser", async () => {
    const breaker = new ToolBreaker("kb-search", options, metrics());
    const mistakes = breakerStage(breaker)(scripted(failure(status.INVALID_ARGUMENT, "REQUEST_INVALID")));
    for (let i = 0; i < 4; i++) await rejection(mistakes(searchCall()));
    const lost = breakerStage(breaker)(async (call) => {
      call.attempt.lost = true;
      throw failure(status.CANCELLED);
    });
    for (let i = 0; i < 4; i++) await lost(searchCall()).catch(() => undefined);
    expect(breaker.state).toBe("closed");
    breaker.shutdown();
  });

  it("is not tripped by answers over the caller's own bound: the tool answered", async () => {
    const breaker = new ToolBreaker("kb-search", options, metrics());
    const stage = breakerStage(breaker)(scripted(failure(status.INTERNAL, "ANSWER_TOO_LARGE")));
    for (let i = 0; i < 4; i++) await rejection(stage(searchCall()));
    expect(breaker.state).toBe("closed");
    breaker.shutdown();
  });

  it("closes when its half-open probe is answered, a refusal of the request included, and opens again when it is not", async () => {
    for (const [probe, after] of [
      [failure(status.NOT_FOUND, "ORDER_NOT_FOUND"), "closed"],
      [failure(status.INVALID_ARGUMENT, "REQUEST_INVALID"), "closed"],
      [failure(status.INTERNAL, "ANSWER_TOO_LARGE"), "closed"],
      [failure(status.UNAVAILABLE), "open"],
      [failure(status.CANCELLED, "CALL_CANCELLED"), "open"],
    ] as const) {
      const breaker = new ToolBreaker("kb-search", { ...options, resetTimeoutMs: 20 }, metrics());
      let next: CallError = failure(status.UNAVAILABLE);
      const stage = breakerStage(breaker)(async (call) => {
        call.attempt.number = ++call.sent.attempts;
        throw next;
      });
      for (let i = 0; i < 2; i++) await rejection(stage(searchCall()));
      expect(breaker.state).toBe("open");
      await new Promise((elapsed) => setTimeout(elapsed, 40));
      expect(breaker.state).toBe("half-open");
      next = probe;
      // The caller gets the tool's answer as it was, not the breaker's.
      expect((await rejection(stage(searchCall()))).reason).toBe(probe.reason);
      expect([probe.reason, breaker.state]).toEqual([probe.reason, after]);
      breaker.shutdown();
    }
  });

  it("does not count a timeout its caller forced by a short deadline, nor an attempt never sent", async () => {
    const breaker = new ToolBreaker("kb-search", options, metrics());
    const late = breakerStage(breaker)(scripted(failure(status.DEADLINE_EXCEEDED)));
    for (let i = 0; i < 4; i++) {
      const call = searchCall();
      call.cutShort = true;
      await rejection(late(call));
    }
    const unsent = breakerStage(breaker)(() => Promise.reject(failure(status.DEADLINE_EXCEEDED, "DEADLINE_PASSED")));
    for (let i = 0; i < 4; i++) await rejection(unsent(searchCall()));
    expect(breaker.state).toBe("closed");
    breaker.shutdown();
  });

  it("counts a timeout of an attempt that had the tool's whole time", async () => {
    const breaker = new ToolBreaker("kb-search", options, metrics());
    const slow = breakerStage(breaker)(scripted(failure(status.DEADLINE_EXCEEDED)));
    for (let i = 0; i < 2; i++) await rejection(slow(searchCall()));
    expect(breaker.state).toBe("open");
    breaker.shutdown();
  });
});

describe("retryStage", () => {
  const parts = () => ({ budget: new RetryBudget(0.1, 10), metrics: metrics(), random: () => 0 });
  const fast = { baseBackoffMs: 1, maxBackoffMs: 1 };

  it("retries a retryable failure of a read until it answers", async () => {
    const next = scripted(failure(status.UNAVAILABLE), failure(status.UNAVAILABLE), { hits: [] });
    const call = searchCall();
    call.deadline = Date.now() + 5_000;
    await expect(retryStage(methodPolicy(search), fast, parts())(next)(call)).resolves.toEqual({ hits: [] });
    expect(call.sent.attempts).toBe(3);
  });

  it("sends an irreversible call once without its idempotency key, retries it with one", async () => {
    const deadline = Date.now() + 5_000;
    const unkeyed = scripted(failure(status.UNAVAILABLE));
    await rejection(retryStage(methodPolicy(refund), fast, parts())(unkeyed)(refundCall("", deadline)));
    expect(unkeyed.calls).toBe(1);
    const keyed = scripted(failure(status.UNAVAILABLE), {});
    await retryStage(methodPolicy(refund), fast, parts())(keyed)(refundCall("k-1", deadline));
    expect(keyed.calls).toBe(2);
  });

  it("gives up at once when the server's RetryInfo asks for a wait beyond the deadline", async () => {
    const next = scripted(failure(status.UNAVAILABLE, "OVERLOADED", { retryAfterMs: 10_000 }));
    const call = searchCall();
    call.deadline = Date.now() + 1_000;
    const error = await rejection(retryStage(methodPolicy(search), fast, parts())(next)(call));
    expect([error.reason, next.calls]).toEqual(["OVERLOADED", 1]);
  });

  it("stops when the retry budget is spent", async () => {
    const budget = new RetryBudget(0, 1);
    const next = scripted(failure(status.UNAVAILABLE));
    const call = searchCall();
    call.deadline = Date.now() + 5_000;
    await rejection(retryStage(methodPolicy(search), fast, { ...parts(), budget })(next)(call));
    expect(next.calls).toBe(2);
  });

  it("sends no further attempt once the caller's signal aborts during the backoff", async () => {
    const next = scripted(failure(status.UNAVAILABLE), { hits: [] });
    const stop = new AbortController();
    const call = searchCall("refund", { signal: stop.signal });
    call.deadline = Date.now() + 5_000;
    const slow = { baseBackoffMs: 200, maxBackoffMs: 200 };
    const pending = rejection(retryStage(methodPolicy(search), slow, { ...parts(), random: () => 1 })(next)(call));
    setTimeout(() => stop.abort(), 20);
    const error = await pending;
    expect([error.code, next.calls]).toEqual([status.UNAVAILABLE, 1]);
  });

  it("marks the failure outcome-unknown when an attempt may have acted, even if a later one was refused first", async () => {
    const next = scripted(failure(status.UNAVAILABLE), failure(status.UNAVAILABLE, "OVERLOADED"));
    const call = refundCall("k-1", Date.now() + 5_000);
    // As the hedging slot records a first attempt that ended without proof it was refused.
    call.sent.mayHaveActed = true;
    const error = await rejection(retryStage(methodPolicy(refund), { ...fast, maxAttempts: 2 }, parts())(next)(call));
    expect([error.reason, error.outcomeUnknown]).toEqual(["OVERLOADED", true]);
  });
});

describe("hedgeStage", () => {
  const slot = () => ({ maxHedges: 1, fixedDelayMs: 20, slaP95Ms: 100, latency: new LatencyWindow() });
  const seenBoth = () => {
    const slow = new SlowReplicas(3, 10_000);
    slow.answered("a");
    slow.answered("b");
    return slow;
  };
  /** First attempt on replica a, never answering until cancelled; the hedge on b answers. */
  const replicas = () => {
    const cancelled: string[] = [];
    const next = (call: ClientCall) =>
      new Promise((resolve, reject) => {
        call.attempt.number = ++call.sent.attempts;
        const peer = call.attempt.hedge ? "b" : "a";
        const cancel = () => {
          cancelled.push(peer);
          call.attempt.pending = false;
          reject(failure(status.CANCELLED));
        };
        // As the balancer reports where it started the attempt (grpc-js's getPeer() says "unknown" until an answer).
        call.attempt.address = peer;
        call.attempt.call = { cancel } as unknown as ClientUnaryCall;
        if (call.attempt.hedge) resolve({ from: peer });
      });
    return { next, cancelled };
  };

  it("hedges to another replica after the delay; the first answer wins, the loser is cancelled and not a failed peer", async () => {
    const { next, cancelled } = replicas();
    const call = searchCall();
    call.sent.maxAttempts = 4;
    const parts = { overrides: {}, slow: seenBoth(), budget: new RetryBudget(0.1, 10), metrics: metrics() };
    await expect(hedgeStage(slot(), parts)(next)(call)).resolves.toEqual({ from: "b" });
    expect([call.outcome.hedged, call.outcome.winner, cancelled, call.sent.failedPeers]).toEqual([true, 2, ["a"], []]);
  });

  /** A first attempt on replica a (when the balancer has said so) that answers after 60 ms. */
  const slowAnswer = (known: boolean) => async (c: ClientCall) => {
    c.attempt.number = ++c.sent.attempts;
    if (known) c.attempt.address = "a";
    await new Promise((resolve) => setTimeout(resolve, 60));
    return { hits: [] };
  };

  it("sends no hedge from the lower half of the retry budget", async () => {
    const budget = new RetryBudget(0, 10);
    while (budget.tryHedge());
    const call = searchCall();
    call.sent.maxAttempts = 4;
    const parts = { overrides: {}, slow: seenBoth(), budget, metrics: metrics() };
    await expect(hedgeStage(slot(), parts)(slowAnswer(true))(call)).resolves.toEqual({ hits: [] });
    expect([call.outcome.hedged, call.sent.attempts, budget.tokens]).toEqual([false, 1, 5]);
  });

  it("sends no hedge while the balancer has not said which replica the first attempt went to", async () => {
    const call = searchCall();
    call.sent.maxAttempts = 4;
    const budget = new RetryBudget(0.1, 10);
    const parts = { overrides: {}, slow: seenBoth(), budget, metrics: metrics() };
    await expect(hedgeStage(slot(), parts)(slowAnswer(false))(call)).resolves.toEqual({ hits: [] });
    expect([call.outcome.hedged, call.sent.attempts, budget.tokens]).toEqual([false, 1, 10]);
  });

  it("fails with a replica's own failure over one of an attempt no replica took, naming every attempt", async () => {
    const call = searchCall();
    call.sent.maxAttempts = 4;
    const parts = { overrides: {}, slow: seenBoth(), budget: new RetryBudget(0.1, 10), metrics: metrics() };
    // The first attempt times out on replica a; the hedge, never started on a replica, fails after it.
    const failing = async (c: ClientCall) => {
      c.attempt.number = ++c.sent.attempts;
      if (!c.attempt.hedge) c.attempt.address = "a";
      await new Promise((resolve) => setTimeout(resolve, 40));
      throw failure(c.attempt.hedge ? status.UNAVAILABLE : status.DEADLINE_EXCEEDED);
    };
    const error = await rejection(hedgeStage(slot(), parts)(failing)(call));
    expect([error.code, error.attempts, call.sent.failedPeers]).toEqual([status.DEADLINE_EXCEEDED, 2, ["a"]]);
  });

  it("records a failed attempt's replica, and whether it may have acted", async () => {
    const call = searchCall();
    const parts = { overrides: {}, slow: seenBoth(), budget: new RetryBudget(0.1, 10), metrics: metrics() };
    const failing = async (c: ClientCall) => {
      c.attempt.address = "a";
      throw failure(status.DEADLINE_EXCEEDED);
    };
    await rejection(hedgeStage({ ...slot(), maxHedges: 0 }, parts)(failing)(call));
    expect([call.sent.failedPeers, call.sent.mayHaveActed]).toEqual([["a"], true]);
  });
});

describe("cacheStage", () => {
  const fallback = { cacheable: true, maxAgeMs: 60_000, emptyFallback: true };

  it("serves the last good answer when the tool fails, marked as from the cache with its age", async () => {
    const stage = cacheStage(fallback, new ResponseCache(10, 60_000, 1 << 20));
    const good = { hits: [hit] };
    await stage(scripted(good))(searchCall());
    const call = searchCall();
    await expect(stage(scripted(failure(status.UNAVAILABLE)))(call)).resolves.toBe(good);
    expect(call.outcome.source).toBe("cache");
    expect(call.outcome.cacheAgeMs).toBeGreaterThanOrEqual(0);
    expect(call.outcome.liveError?.code).toBe(status.UNAVAILABLE);
  });

  it("tells a cached answer's age by the monotonic clock: a wall clock stepped back a minute does not make it younger", async () => {
    const stage = cacheStage(fallback, new ResponseCache(10, 60_000, 1 << 20));
    await stage(scripted({ hits: [hit] }))(searchCall());
    await sleep(50);
    const wall = Date.now();
    const stepped = vi.spyOn(Date, "now").mockImplementation(() => wall - 60_000);
    try {
      const call = searchCall();
      await stage(scripted(failure(status.UNAVAILABLE)))(call);
      expect(call.outcome.source).toBe("cache");
      expect(call.outcome.cacheAgeMs).toBeGreaterThanOrEqual(50);
      expect(call.outcome.cacheAgeMs).toBeLessThan(5_000);
      expect(call.outcome.cachedAt).toBe(wall - 60_000 - call.outcome.cacheAgeMs!);
    } finally {
      stepped.mockRestore();
    }
  });

  it("answers with the declared degraded answer when nothing is cached, unless the caller declines it", async () => {
    const stage = cacheStage(fallback, new ResponseCache(10, 60_000, 1 << 20));
    const call = searchCall("never asked");
    await expect(stage(scripted(failure(status.UNAVAILABLE)))(call)).resolves.toEqual(create(SearchResponseSchema, {}));
    expect(call.outcome.source).toBe("degraded");
    await rejection(stage(scripted(failure(status.UNAVAILABLE)))(searchCall("never asked", { degraded: false })));
  });

  it("forgets an answer once the tool refuses the same request (the entity is gone): a later outage does not serve it", async () => {
    const stage = cacheStage(fallback, new ResponseCache(10, 60_000, 1 << 20));
    await stage(scripted({ hits: [hit] }))(searchCall());
    await rejection(stage(scripted(failure(status.NOT_FOUND, "NOT_FOUND", { refusedByTool: true })))(searchCall()));
    const call = searchCall();
    await expect(stage(scripted(failure(status.UNAVAILABLE)))(call)).resolves.toEqual(create(SearchResponseSchema, {}));
    expect(call.outcome.source).toBe("degraded");
  });

  it("of two calls at once, keeps the answer of the one sent later, aged from when it was sent", async () => {
    const stage = cacheStage(fallback, new ResponseCache(10, 60_000, 1 << 20));
    const older = { hits: [{ ...hit, title: "older" }] };
    const newer = { hits: [{ ...hit, title: "newer" }] };
    // The older read is sent first and answers last.
    const first = stage(async (call) => {
      await sleep(80);
      return scripted(older)(call);
    })(searchCall());
    await sleep(20);
    await stage(scripted(newer))(searchCall());
    await first;
    await expect(stage(scripted(failure(status.UNAVAILABLE)))(searchCall())).resolves.toBe(newer);
    // An answer that took 80 ms to come is at least that old: the tool read it when it was asked.
    await stage(async (call) => {
      await sleep(80);
      return scripted(older)(call);
    })(searchCall("slow"));
    const served = searchCall("slow");
    await stage(scripted(failure(status.UNAVAILABLE)))(served);
    expect(served.outcome.cacheAgeMs).toBeGreaterThanOrEqual(80);
  });

  it("never answers for a caller's mistake, nor when the caller asks for the live value", async () => {
    const stage = cacheStage(fallback, new ResponseCache(10, 60_000, 1 << 20));
    await stage(scripted({ hits: [] }))(searchCall());
    await rejection(stage(scripted(failure(status.INVALID_ARGUMENT)))(searchCall()));
    await rejection(stage(scripted(failure(status.UNAVAILABLE)))(searchCall("refund", { fallback: false })));
  });
});

describe("the fallback cache's size", () => {
  const fallback = { cacheable: true, maxAgeMs: 60_000, emptyFallback: true };
  /** A Search answer of about `bytes` on the wire, decoded as the transport decodes it (which records its size). */
  const answerOf = (bytes: number) =>
    kbTarget.deserialize(
      Buffer.from(
        toBinary(SearchResponseSchema, create(SearchResponseSchema, { hits: [{ ...hit, title: "x".repeat(bytes) }] })),
      ),
    ) as object;
  const served = async (stage: ClientCallFn, query: string) => {
    const call = searchCall(query);
    await stage(call);
    return call.outcome.source;
  };

  it("keeps answers up to its bytes on the wire, the oldest going first, and none over a quarter of them", async () => {
    const cache = new ResponseCache(1000, 60_000, 1 << 20);
    const keep = cacheStage(fallback, cache);
    // Ten answers of 200 KB into 1 MiB: the last four or five stay.
    for (let i = 0; i < 10; i += 1) await keep(scripted(answerOf(200_000)))(searchCall(`q${i}`));
    const failing = keep(scripted(failure(status.UNAVAILABLE)));
    const sources = [];
    for (let i = 0; i < 10; i += 1) sources.push(await served(failing, `q${i}`));
    expect(sources.slice(0, 5)).toEqual(Array(5).fill("degraded"));
    expect(sources.slice(6)).toEqual(Array(4).fill("cache"));
    // 300 KB is over a quarter of 1 MiB: not kept, and nothing kept is pushed out for it.
    await keep(scripted(answerOf(300_000)))(searchCall("large"));
    expect([await served(failing, "large"), await served(failing, "q9")]).toEqual(["degraded", "cache"]);
  });
});

describe("callMetricsStage", () => {
  it("counts one outcome per call: ok, a fallback by the live failure's code, or the refusal", async () => {
    const registry = new Registry();
    const fallback = { cacheable: true, maxAgeMs: 60_000, emptyFallback: false };
    const stage = callMetricsStage(new ClientMetrics(registry), { target: kbTarget, fallback });
    await stage(scripted({}))(searchCall());
    const cached = searchCall();
    await stage(async (call) => {
      Object.assign(call.outcome, { source: "cache", liveError: failure(status.UNAVAILABLE) });
      return {};
    })(cached);
    await rejection(stage(scripted(failure(status.UNAVAILABLE, "BREAKER_OPEN")))(searchCall()));
    const page = await registry.metrics();
    const count = (outcome: string, grpc_code: string) =>
      metricValue(page, "loopguard_tool_client_calls_total", { tool: "kb-search", outcome, grpc_code });
    expect([
      count("ok", "OK"),
      count("fallback_cache", "UNAVAILABLE"),
      count("breaker_rejected", "UNAVAILABLE"),
    ]).toEqual([1, 1, 1]);
  });
});

describe("metadataFor", () => {
  it("adds the bearer token and the attempt's routing headers to a copy of the caller's metadata", () => {
    const metadata = new Metadata();
    metadata.set("x-request", "1");
    const call = { ...searchCall(), metadata, token: "t" };
    const sent = metadataFor({ ...call, attempt: { ...call.attempt, avoid: ["a"], preferNot: ["b"] } });
    expect([sent.get("x-request"), sent.get("authorization"), metadata.get("authorization")]).toEqual([
      ["1"],
      ["Bearer t"],
      [],
    ]);
    expect([sent.get(AVOID_HEADER), sent.get(PREFER_NOT_HEADER)]).toEqual([["a"], ["b"]]);
  });
});

describe("answerTooLarge", () => {
  const refused = (details: string, code = status.RESOURCE_EXHAUSTED) =>
    Object.assign(new Error(details), { code, details, metadata: new Metadata() });

  it("turns grpc-js's refusal of an answer over this channel's bound into INTERNAL ANSWER_TOO_LARGE, never retried", () => {
    const error = answerTooLarge(
      refused("Received message larger than max (300000 vs 262144)"),
      searchCall(),
      1,
      262_144,
    );
    expect([error?.code, error?.reason, error?.retryable, error?.metadata]).toEqual([
      status.INTERNAL,
      "ANSWER_TOO_LARGE",
      false,
      { bytes: "300000", max_bytes: "262144" },
    ]);
    expect(error?.message).toBe(
      "kb-search answered Search with 300000 bytes, more than the 262144 this caller accepts",
    );
  });

  it("leaves any other RESOURCE_EXHAUSTED as it is, and a server's refusal of a request over its own limit", () => {
    expect(
      answerTooLarge(refused("Received message larger than max (5000000 vs 4194304)"), searchCall(), 1, 262_144),
    ).toBeUndefined();
    expect(answerTooLarge(refused("overloaded"), searchCall(), 1, 262_144)).toBeUndefined();
  });
});
