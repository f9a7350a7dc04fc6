import { setTimeout as sleep } from "node:timers/promises";
import { refusal } from "@loopguard/test-kit";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { CallError } from "../src/client/call-error.js";
import type { ToolClientOptions } from "../src/client/plan.js";
import { toolClient } from "../src/client/tool-client.js";
import { status, ToolError } from "../src/errors.js";
import type { ToolHandlers } from "../src/serve.js";
import { metricValue, SAMPLE_HIT, startTestTool, type TestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A kb-search server whose handler counts the calls it sees. */
async function kbServer(handler?: ToolHandlers<typeof KbSearchService>["search"], options = {}) {
  const seen = { calls: 0 };
  const tool = await startTestTool(
    {
      service: KbSearchService,
      handlers: {
        search: async (req, ctx) => {
          seen.calls += 1;
          return handler ? handler(req, ctx) : { hits: [{ ...SAMPLE_HIT, title: `hits for ${req.query}` }] };
        },
      },
    },
    options,
  );
  cleanups.push(() => tool.close());
  return { tool, seen };
}

async function kbClient(target: string | string[], overrides: Partial<ToolClientOptions> = {}) {
  const registry = new Registry();
  const token = await testToken({ subject: "orchestrator", scopes: ["kb:read"] });
  // Exact call counts matter here: no hedges (a read hedged at its observed p95 adds about 5 % of calls; see hedge.int.test.ts).
  const client = toolClient(KbSearchService, {
    target,
    token,
    registry,
    random: () => 1,
    hedge: { enabled: false },
    ...overrides,
  });
  cleanups.push(() => client.close());
  return { client, registry };
}

function outage(tool: TestTool<typeof KbSearchService>, on: boolean, retryAfterMs = 0) {
  tool.server.faults.set({
    $typeName: "loopguard.tool.v1.FaultProfile",
    addedLatencyMs: 0,
    responseDelayMs: 0,
    errorRate: 0,
    outage: on,
    retryAfterMs,
    methods: [],
  });
}

describe("toolClient", () => {
  it("returns a live answer with its source, attempts and latency", async () => {
    const { tool } = await kbServer();
    const { client } = await kbClient(tool.address);
    const result = await client.call("search", { query: "refund", limit: 3 });
    expect(result.source).toBe("live");
    expect(result.attempts).toBe(1);
    expect(result.response.hits[0]?.docId).toBe("refund-policy");
    expect(result.latencyMs).toBeGreaterThan(0);
  });

  it("never sends an invalid request: CLIENT_VALIDATION_FAILED naming the field", async () => {
    const { tool, seen } = await kbServer();
    const { client } = await kbClient(tool.address);
    const error = await refusal(client.call("search", { query: "", limit: 3 }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("CLIENT_VALIDATION_FAILED");
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["query"]);
    expect(seen.calls).toBe(0);
  });

  it("retries an idempotent call through a transient outage and succeeds", async () => {
    let failuresLeft = 2;
    const { tool, seen } = await kbServer(async () => {
      if (failuresLeft-- > 0) throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "index reloading");
      return { hits: [SAMPLE_HIT] };
    });
    // Three attempts and two backoffs within the call's time on a loaded machine too: kb's SLA of 1 s is not the subject.
    const { client, registry } = await kbClient(tool.address, { timeoutMs: { "*": 10_000 } });
    const result = await client.call("search", { query: "refund", limit: 3 });
    expect(result.source).toBe("live");
    expect(result.attempts).toBe(3);
    expect(seen.calls).toBe(3);
    expect(metricValue(await registry.metrics(), "loopguard_tool_client_retries_total", { tool: "kb-search" })).toBe(2);
  });

  it("does not retry a caller error", async () => {
    const { tool, seen } = await kbServer(async () => {
      throw new ToolError(status.FAILED_PRECONDITION, "INDEX_UNAVAILABLE", "no");
    });
    const { client } = await kbClient(tool.address);
    const error = await refusal(client.call("search", { query: "refund", limit: 3 }), CallError);
    expect(error.code).toBe(status.FAILED_PRECONDITION);
    expect(seen.calls).toBe(1);
  });

  it("waits at least the server's RetryInfo before the next attempt", async () => {
    const times: number[] = [];
    const { tool } = await kbServer(async () => {
      times.push(Date.now());
      if (times.length === 1)
        throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "busy", { retryAfterMs: 200 });
      return { hits: [SAMPLE_HIT] };
    });
    const { client } = await kbClient(tool.address);
    await client.call("search", { query: "refund", limit: 3 });
    expect(times).toHaveLength(2);
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(195);
  });

  it("gives up at once with the server's reason when RetryInfo exceeds the time left", async () => {
    const { tool, seen } = await kbServer(async () => {
      throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "rebuilding", { retryAfterMs: 30_000 });
    });
    const { client } = await kbClient(tool.address, { timeoutMs: { "*": 1000 }, cache: { maxEntries: 1 } });
    const started = Date.now();
    const result = await client.call("search", { query: "refund", limit: 3 });
    // kb-search declares an empty degraded answer; the live error is kept beside it.
    expect(result.source).toBe("degraded");
    expect(result.liveError?.reason).toBe("INDEX_UNAVAILABLE");
    expect(result.liveError?.retryAfterMs).toBe(30_000);
    // At once, not at the 1,000 ms timeout (the margin is for a busy machine).
    expect(Date.now() - started).toBeLessThan(600);
    expect(seen.calls).toBe(1);
  });

  it("keeps retries within the retry budget during a full outage", async () => {
    const { tool, seen } = await kbServer();
    outage(tool, true);
    const { client } = await kbClient(tool.address, { breaker: { volumeThreshold: 1_000_000 } });
    const n = 200;
    for (let i = 0; i < n; i += 1) {
      const result = await client.call("search", { query: `q${i}`, limit: 1 });
      expect(result.source).toBe("degraded");
    }
    const attempts = metricValue(await tool.server.metrics.registry.metrics(), "grpc_server_started_total", {
      grpc_method: "Search",
    });
    expect(seen.calls).toBe(0);
    expect(attempts).toBeGreaterThanOrEqual(n);
    expect(attempts).toBeLessThanOrEqual(1.2 * n);
  });

  it("opens the breaker after the threshold, sends nothing while open, and closes after a half-open probe", async () => {
    const { tool } = await kbServer();
    const { client, registry } = await kbClient(tool.address, {
      breaker: { volumeThreshold: 4, errorThresholdPercentage: 50, resetTimeoutMs: 300 },
      retry: { maxAttempts: 1 },
    });
    const state = async () =>
      metricValue(await registry.metrics(), "loopguard_tool_breaker_state", { tool: "kb-search" });
    expect(await state()).toBe(0);
    // Each transition's series is there at 0 before the first: the breaker alert's increase() sees the first opening.
    const before0 = await registry.metrics();
    for (const s of ["open", "half-open", "closed"])
      expect(before0).toMatch(
        new RegExp(`^loopguard_tool_breaker_transitions_total\\{[^}]*state="${s}"[^}]*\\} 0$`, "m"),
      );
    outage(tool, true);
    for (let i = 0; i < 4; i += 1) await client.call("search", { query: `q${i}`, limit: 1 });
    expect(client.breakerState).toBe("open");
    expect(await state()).toBe(2);
    const before = metricValue(await tool.server.metrics.registry.metrics(), "grpc_server_started_total", {
      grpc_method: "Search",
    });
    const rejected = await client.call("search", { query: "while-open", limit: 1 });
    expect(rejected.source).toBe("degraded");
    expect(rejected.attempts).toBe(0);
    expect(rejected.liveError?.reason).toBe("BREAKER_OPEN");
    expect(
      metricValue(await tool.server.metrics.registry.metrics(), "grpc_server_started_total", { grpc_method: "Search" }),
    ).toBe(before);
    outage(tool, false);
    await sleep(350);
    expect(client.breakerState).toBe("half-open");
    expect(await state()).toBe(1);
    const probe = await client.call("search", { query: "probe", limit: 1 });
    expect(probe.source).toBe("live");
    expect(client.breakerState).toBe("closed");
    expect(await state()).toBe(0);
    const page = await registry.metrics();
    for (const s of ["open", "half-open", "closed"])
      expect(metricValue(page, "loopguard_tool_breaker_transitions_total", { state: s })).toBe(1);
  });

  it("leaves the breaker closed on caller errors", async () => {
    const { tool } = await kbServer(async () => {
      throw new ToolError(status.NOT_FOUND, "INDEX_UNAVAILABLE", "nothing");
    });
    const { client } = await kbClient(tool.address, { breaker: { volumeThreshold: 2 } });
    for (let i = 0; i < 10; i += 1) {
      const error = await refusal(client.call("search", { query: `q${i}`, limit: 1 }), CallError);
      expect(error.code).toBe(status.NOT_FOUND);
    }
    expect(client.breakerState).toBe("closed");
  });

  it("fails fast past the bulkhead with RESOURCE_EXHAUSTED, queueing at most the bound", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { tool, seen } = await kbServer(async () => {
      await gate;
      return { hits: [] };
    });
    const { client } = await kbClient(tool.address, {
      bulkhead: { maxInFlight: 2, maxQueue: 3 },
      cache: { maxEntries: 1 },
    });
    const calls = Array.from({ length: 20 }, (_, i) => client.call("search", { query: `q${i}`, limit: 1 }));
    // The two let through reach the server (polled: a loaded machine may take longer than a moment).
    await expect.poll(() => seen.calls, { timeout: 5000 }).toBe(2);
    release();
    const results = await Promise.all(calls);
    expect(results.filter((r) => r.source === "live")).toHaveLength(5);
    const rejected = results.filter((r) => r.source === "degraded");
    expect(rejected).toHaveLength(15);
    for (const r of rejected) {
      expect(r.liveError?.code).toBe(status.RESOURCE_EXHAUSTED);
      expect(r.liveError?.reason).toBe("BULKHEAD_FULL");
      expect(r.attempts).toBe(0);
    }
  });

  it("a call queued behind the bulkhead gets its whole SLA timeout once it is let go", async () => {
    const { tool } = await kbServer(async () => {
      await sleep(300);
      return { hits: [SAMPLE_HIT] };
    });
    const { client } = await kbClient(tool.address, {
      bulkhead: { maxInFlight: 1, maxQueue: 1 },
      timeoutMs: { "*": 450 },
    });
    const started = performance.now();
    const [first, queued] = await Promise.all([
      client.call("search", { query: "a", limit: 1 }),
      client.call("search", { query: "b", limit: 1 }),
    ]);
    expect([first.source, queued.source]).toEqual(["live", "live"]);
    // 300 ms waiting for the slot + 300 ms answering: past 450 ms from the call, within 450 ms of being let go.
    expect(performance.now() - started).toBeGreaterThanOrEqual(590);
  });

  it("serves a cached answer with its age when the tool fails, and live again once it recovers", async () => {
    const { tool } = await kbServer();
    const { client } = await kbClient(tool.address, { retry: { maxAttempts: 1 } });
    const live = await client.call("search", { query: "refund", limit: 3 });
    await sleep(30);
    outage(tool, true);
    const cached = await client.call("search", { query: "refund", limit: 3 });
    expect(cached.source).toBe("cache");
    expect(cached.cacheAgeMs).toBeGreaterThanOrEqual(25);
    expect(cached.response).toEqual(live.response);
    const fresh = await client.call("search", { query: "never asked", limit: 3 });
    expect(fresh.source).toBe("degraded");
    expect(fresh.response.hits).toEqual([]);
    outage(tool, false);
    expect((await client.call("search", { query: "refund", limit: 3 })).source).toBe("live");
  });

  it("sends the tighter of the SLA timeout and the caller's deadline; the server sees it", async () => {
    let serverDeadline: Date | undefined;
    const { tool } = await kbServer(async (req, ctx) => {
      if (req.query !== "slow") return { hits: [] };
      serverDeadline = ctx.deadline;
      await sleep(5_000, undefined, { signal: ctx.signal }).catch(() => undefined);
      return { hits: [] };
    });
    const { client } = await kbClient(tool.address, { cache: { maxEntries: 1 } });
    // Connected first: the measured call's 100 ms are for the deadline, not for name resolution and the handshake.
    await client.call("search", { query: "warm-up", limit: 1 });
    const started = Date.now();
    const deadline = new Date(started + 100);
    const result = await client.call("search", { query: "slow", limit: 1 }, { deadline });
    const elapsed = Date.now() - started;
    expect(result.source).toBe("degraded");
    expect(result.liveError?.code).toBe(status.DEADLINE_EXCEEDED);
    // By the caller's 100 ms, not kb-search's 1,000 ms SLA timeout; the server's deadline is the time
    // left when the call was sent, counted from when it arrived (the margin is for a busy machine).
    expect(elapsed).toBeLessThan(500);
    expect(serverDeadline!.getTime()).toBeLessThanOrEqual(deadline.getTime() + 100);
  });

  it("a call whose caller already gave up is not sent: CANCELLED, the handler never runs", async () => {
    let handled = 0;
    const { tool } = await kbServer(async () => {
      handled += 1;
      return { hits: [] };
    });
    const { client } = await kbClient(tool.address);
    await client.call("search", { query: "warm-up", limit: 1 });
    const error = await client.call("search", { query: "late", limit: 1 }, { signal: AbortSignal.abort() }).then(
      () => undefined,
      (e: { code: number }) => e,
    );
    expect(error?.code).toBe(status.CANCELLED);
    await sleep(200);
    expect(handled).toBe(1);
  });

  it("a handler that passes its ctx makes calls that end by the incoming call's deadline", async () => {
    let onwardDeadline: Date | undefined;
    let onwardEndedAt = 0;
    const { tool: downstream } = await kbServer(async (_req, ctx) => {
      onwardDeadline = ctx.deadline;
      await sleep(5_000, undefined, { signal: ctx.signal }).catch(() => undefined);
      onwardEndedAt = Date.now();
      return { hits: [] };
    });
    const { client: onward } = await kbClient(downstream.address);
    const { tool: upstream } = await kbServer(async (req, ctx) => (await onward.call("search", req, ctx)).response);
    const caller = await upstream.client(["kb:read"]);
    const started = Date.now();
    const error = await caller.search({ query: "slow", limit: 1 }, { deadline: 200 }).then(
      () => undefined,
      (e: { code: number }) => e,
    );
    expect(error?.code).toBe(status.DEADLINE_EXCEEDED);
    // kb-search's own SLA timeout is 1000 ms: the onward call got the caller's 200 ms instead (the
    // margin is for a busy machine between reading the clock here and the client setting the deadline).
    expect(onwardDeadline!.getTime()).toBeLessThanOrEqual(started + 600);
    await expect.poll(() => onwardEndedAt, { timeout: 2000 }).toBeGreaterThan(0);
    expect(onwardEndedAt - started).toBeLessThan(900);
  });

  it("balances over several replicas round robin", async () => {
    const a = await kbServer();
    const b = await kbServer();
    const { client } = await kbClient([a.tool.address, b.tool.address]);
    for (let i = 0; i < 20; i += 1) await client.call("search", { query: `q${i}`, limit: 1 });
    expect(a.seen.calls).toBeGreaterThan(0);
    expect(b.seen.calls).toBeGreaterThan(0);
    expect(a.seen.calls + b.seen.calls).toBe(20);
  });

  it("balances over replicas named by host name (not only IP literals)", async () => {
    const a = await kbServer();
    const b = await kbServer();
    const port = (address: string) => address.slice(address.lastIndexOf(":") + 1);
    const { client } = await kbClient([`localhost:${port(a.tool.address)}`, `localhost:${port(b.tool.address)}`]);
    for (let i = 0; i < 40; i += 1) await client.call("search", { query: `q${i}`, limit: 1 });
    expect(a.seen.calls + b.seen.calls).toBe(40);
    expect(a.seen.calls).toBeGreaterThanOrEqual(10);
    expect(b.seen.calls).toBeGreaterThanOrEqual(10);
  });

  it("retries an irreversible call only with its idempotency key", async () => {
    const { mayRetry } = await import("../src/client/retry.js");
    const { methodPolicy } = await import("../src/contract.js");
    const refund = BillingService.method.refund;
    expect(mayRetry(methodPolicy(refund), { idempotencyKey: "" })).toBe(false);
    expect(mayRetry(methodPolicy(refund), { idempotencyKey: "key-0123456789abcdef" })).toBe(true);
    expect(mayRetry(methodPolicy(KbSearchService.method.search), {})).toBe(true);
  });
});
