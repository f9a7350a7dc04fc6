import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { Client, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import { errorOf, refusal } from "@loopguard/test-kit";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { afterEach, describe, expect, it } from "vitest";
import { mintToken, newKeyPair, signingKeyFromJwk } from "../src/auth.js";
import { CallError } from "../src/client/call-error.js";
import { createRawClient, type RawClient } from "../src/raw-client.js";
import { decodeStatusDetails, status, ToolError } from "../src/errors.js";
import type { ToolHandlers } from "../src/serve.js";
import type { Interceptor } from "../src/server/interceptor.js";
import {
  checkHealth,
  metricValue,
  SAMPLE_HIT,
  startTestTool,
  testPersonKey,
  testToken,
  type TestTool,
} from "../testing/index.js";

type KbHandlers = ToolHandlers<typeof KbSearchService>;

/** How the server refused `client`'s search. */
const refusedSearch = (client: RawClient<typeof KbSearchService>) =>
  refusal(client.search({ query: "refund", limit: 3 }), CallError);

/** How the server at `address` refused a search sent with `token` (or none), on a client of its own. */
async function refusedSearchWith(address: string, token?: string): Promise<CallError> {
  const client = createRawClient(KbSearchService, address, token === undefined ? {} : { token });
  try {
    return await refusedSearch(client);
  } finally {
    client.close();
  }
}

const okHandlers: KbHandlers = { search: async (req) => ({ hits: [SAMPLE_HIT].slice(0, req.limit) }) };

let tool: TestTool<typeof KbSearchService> | undefined;
afterEach(async () => {
  await tool?.close();
  tool = undefined;
});

async function start(handlers: KbHandlers, options = {}) {
  tool = await startTestTool({ service: KbSearchService, handlers }, options);
  return tool;
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("serveTool", () => {
  it("serves a valid request", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["kb:read"]);
    const res = await client.search({ query: "refund", limit: 3 });
    expect(res.hits.map((h) => h.docId)).toEqual(["refund-policy"]);
  });

  it("serves on an IPv6 literal host (TOOL_HOST=::1), its address in brackets", async () => {
    const t = await start(okHandlers, { host: "::1" });
    expect(t.address).toMatch(/^\[::1\]:\d+$/);
    const client = await t.client(["kb:read"]);
    expect((await client.search({ query: "refund", limit: 1 })).hits).toHaveLength(1);
    expect((await fetch(`http://[::1]:${t.server.metricsPort}/metrics`)).status).toBe(200);
  });

  it("refuses a request without a token as UNAUTHENTICATED", async () => {
    const t = await start(okHandlers);
    const error = await refusedSearchWith(t.address);
    expect(error.code).toBe(status.UNAUTHENTICATED);
    expect(error.reason).toBe("CREDENTIALS_INVALID");
  });

  it("refuses a token signed with a key outside its JWKS as UNAUTHENTICATED", async () => {
    const t = await start(okHandlers);
    const intruder = signingKeyFromJwk(newKeyPair("test-key").privateJwk);
    const token = await mintToken(intruder, { subject: "intruder", audience: "kb-search", scopes: ["kb:read"] });
    const error = await refusedSearchWith(t.address, token);
    expect(error.code).toBe(status.UNAUTHENTICATED);
  });

  it("refuses a valid token issued for another service as UNAUTHENTICATED, naming this one", async () => {
    const t = await start(okHandlers);
    const token = await testToken({ subject: "test", audience: "billing", scopes: ["kb:read"] });
    const error = await refusedSearchWith(t.address, token);
    expect(error.code).toBe(status.UNAUTHENTICATED);
    expect(error.message).toContain("kb-search");
  });

  it("refuses a caller without the method's scope as PERMISSION_DENIED", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["billing:read"]);
    const error = await refusedSearch(client);
    expect(error.code).toBe(status.PERMISSION_DENIED);
    expect(error.reason).toBe("SCOPE_MISSING");
  });

  it("rejects an invalid request with INVALID_ARGUMENT naming each broken field, before the handler runs", async () => {
    let calls = 0;
    const t = await start({
      search: async () => {
        calls += 1;
        return { hits: [] };
      },
    });
    const client = await t.client(["kb:read"]);
    const error = await refusal(client.search({ query: "", limit: 11 }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("REQUEST_INVALID");
    expect(error.fieldViolations.map((v) => v.field).sort()).toEqual(["limit", "query"]);
    expect(calls).toBe(0);
  });

  it("withholds a response that breaks its contract: INTERNAL / CONTRACT_VIOLATION", async () => {
    const t = await start({ search: async () => ({ hits: [{ ...SAMPLE_HIT, snippet: "x".repeat(1001) }] }) });
    const client = await t.client(["kb:read"]);
    const error = await refusedSearch(client);
    expect(error.code).toBe(status.INTERNAL);
    expect(error.reason).toBe("CONTRACT_VIOLATION");
    expect(error.message).not.toContain("xxxx");
    expect(metricValue(await t.server.metrics.registry.metrics(), "loopguard_tool_contract_violations_total")).toBe(1);
  });

  it("turns an unexpected exception into INTERNAL with a generic message, logged with the trace id", async () => {
    const t = await start({
      search: async () => {
        throw new TypeError("secret internals at /srv/app.js:12");
      },
    });
    const client = await t.client(["kb:read"]);
    const metadata = new Metadata();
    metadata.set("traceparent", traceparent);
    const error = await refusal(client.search({ query: "refund", limit: 3 }, { metadata }), CallError);
    expect(error.code).toBe(status.INTERNAL);
    expect(error.message).not.toContain("secret");
    expect(error.message).not.toContain("TypeError");
    const line = t.logs.find((l) => l.msg === "unexpected exception in handler");
    expect(line?.trace_id).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
  });

  it("keeps a domain error's code, reason and RetryInfo", async () => {
    const t = await start({
      search: async () => {
        throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "index is rebuilding", { retryAfterMs: 1500 });
      },
    });
    const client = await t.client(["kb:read"]);
    const error = await refusedSearch(client);
    expect(error.code).toBe(status.UNAVAILABLE);
    expect(error.reason).toBe("INDEX_UNAVAILABLE");
    expect(error.domain).toBe("kb.loopguard.dev");
    expect(error.retryAfterMs).toBe(1500);
  });

  it("masks an id card or mobile a handler's error echoes, in the message and field violations", async () => {
    const t = await start({
      search: async (req) => {
        throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", `no customer ${req.query}`, {
          fieldViolations: [{ field: "query", description: `"${req.query}" is a phone number, id 11010519491231002x` }],
          metadata: { customer: req.query },
        });
      },
    });
    const client = await t.client(["kb:read"]);
    for (const phone of ["(139)12345678", "+86 (139) 1234-5678"]) {
      const error = await refusal(client.search({ query: phone, limit: 3 }), CallError);
      expect(error.code).toBe(status.INVALID_ARGUMENT);
      expect(error.message).toBe("no customer [redacted]");
      expect(error.fieldViolations).toEqual([
        { field: "query", description: '"[redacted]" is a phone number, id [redacted]' },
      ]);
    }
  });

  it("maps a reason outside the contract's closed set to INTERNAL", async () => {
    const t = await start({
      search: async () => {
        throw new ToolError(status.NOT_FOUND, "MADE_UP_REASON", "nope");
      },
    });
    const client = await t.client(["kb:read"]);
    const error = await refusedSearch(client);
    expect(error.code).toBe(status.INTERNAL);
  });

  it("counts every call in grpc_server_handled_total by method and code", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["kb:read"]);
    const n = 17;
    await Promise.all(Array.from({ length: n }, () => client.search({ query: "refund", limit: 1 })));
    await refusal(client.search({ query: "", limit: 1 }), CallError);
    const page = await t.server.metrics.registry.metrics();
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" })).toBe(n);
    expect(
      metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "INVALID_ARGUMENT" }),
    ).toBe(1);
    const http = await fetch(`http://127.0.0.1:${t.server.metricsPort}/metrics`).then((r) => r.text());
    expect(metricValue(http, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "OK" })).toBe(n);
  });

  it("sheds calls past the concurrency limit with RESOURCE_EXHAUSTED and RetryInfo, without queueing", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const t = await start(
      {
        search: async () => {
          await gate;
          return { hits: [] };
        },
      },
      // One caller may take every slot here: this is the server's limit (per caller: serve-per-caller.int.test.ts).
      { maxConcurrent: 2, maxConcurrentPerCaller: 2, shedRetryAfterMs: 250 },
    );
    const client = await t.client(["kb:read"]);
    const calls = Array.from({ length: 10 }, () =>
      client.search({ query: "refund", limit: 1 }).then(
        () => "ok",
        (e: CallError) => e,
      ),
    );
    await sleep(200);
    expect(t.server.inFlight()).toBe(2);
    release();
    const results = await Promise.all(calls);
    const shed = results.filter((r): r is CallError => r instanceof CallError);
    expect(results.filter((r) => r === "ok")).toHaveLength(2);
    expect(shed).toHaveLength(8);
    for (const e of shed) {
      expect(e.code).toBe(status.RESOURCE_EXHAUSTED);
      expect(e.reason).toBe("OVERLOADED");
      expect(e.retryAfterMs).toBe(250);
    }
  });

  it("holds a call's slot until its handler ends, even after its caller gave up, and drains waiting for it", async () => {
    let running = 0;
    let most = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    // A handler that does not stop on its signal (a ledger transaction in flight) keeps working after the deadline.
    const t = await start(
      {
        search: async () => {
          running += 1;
          most = Math.max(most, running);
          await gate;
          running -= 1;
          return { hits: [] };
        },
      },
      { maxConcurrent: 1, shedRetryAfterMs: 250 },
    );
    const client = await t.client(["kb:read"]);
    // The first call holds the one slot, and its caller gives up; the others, sent after that, are shed
    // at once, well within their deadlines (which are long for a busy machine: a slot let go with the
    // caller would run them, and they would end DEADLINE_EXCEEDED).
    const first = refusal(client.search({ query: "refund", limit: 1 }, { deadline: 1000 }), CallError);
    await expect.poll(() => running, { timeout: 5000, interval: 5 }).toBe(1);
    const codes = [(await first).code];
    for (let i = 0; i < 4; i += 1)
      codes.push((await refusal(client.search({ query: "refund", limit: 1 }, { deadline: 1000 }), CallError)).code);
    expect(codes).toEqual([status.DEADLINE_EXCEEDED, ...Array(4).fill(status.RESOURCE_EXHAUSTED)]);
    expect([most, t.server.inFlight()]).toEqual([1, 1]);
    const drained = t.server.shutdown();
    await sleep(100);
    expect(running).toBe(1);
    let stopped = false;
    void drained.then(() => (stopped = true));
    await sleep(50);
    expect(stopped).toBe(false);
    release();
    await drained;
    expect([running, t.server.inFlight()]).toEqual([0, 0]);
  });

  it("gives the handler the caller's deadline and aborts it when the deadline passes", async () => {
    const seen: { deadline?: Date; at?: number; aborted?: boolean } = {};
    const t = await start({
      search: async (_req, ctx) => {
        seen.deadline = ctx.deadline;
        seen.at = Date.now();
        await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
        seen.aborted = ctx.signal.aborted;
        return { hits: [] };
      },
    });
    const client = await t.client(["kb:read"]);
    const before = Date.now();
    const error = await refusal(client.search({ query: "refund", limit: 1 }, { deadline: 150 }), CallError);
    expect(error.code).toBe(status.DEADLINE_EXCEEDED);
    expect(Date.now() - before).toBeLessThan(1000);
    // The handler hears the abort once its event loop turn comes: polled, as a loaded machine may take a while.
    await expect.poll(() => seen.aborted, { timeout: 5000 }).toBe(true);
    // The caller's 150 ms counted from the call's arrival, not kb-search's 1,000 ms SLA timeout.
    expect(seen.deadline!.getTime() - seen.at!).toBeLessThanOrEqual(151);
    expect(seen.deadline!.getTime()).toBeGreaterThan(before);
  });

  it("injects faults switched at run time through ToolAdminService", async () => {
    const t = await start(okHandlers);
    const client = await t.client(["kb:read"]);
    const adminToken = await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] });
    const admin = createRawClient(ToolAdminService, t.address, { token: adminToken });
    await admin.setFaults({ profile: { outage: true, retryAfterMs: 30_000 } });
    const error = await refusal(client.search({ query: "refund", limit: 1 }), CallError);
    expect(error.code).toBe(status.UNAVAILABLE);
    expect(error.reason).toBe("FAULT_INJECTED");
    expect(error.retryAfterMs).toBe(30_000);

    await admin.setFaults({ profile: { addedLatencyMs: 120 } });
    const started = Date.now();
    await client.search({ query: "refund", limit: 1 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(110);

    await admin.setFaults({ profile: {} });
    expect((await admin.getFaults({})).profile?.addedLatencyMs).toBe(0);
    await client.search({ query: "refund", limit: 1 });
    const reader = createRawClient(ToolAdminService, t.address, {
      token: await testToken({ subject: "reader", scopes: ["kb:read"] }),
    });
    const denied = await refusal(reader.setFaults({ profile: { outage: true } }), CallError);
    expect(denied.code).toBe(status.PERMISSION_DENIED);
    reader.close();
    admin.close();
  });

  it("refuses a fault profile naming a method the tool does not have, by field, and keeps the profile it had", async () => {
    const t = await start(okHandlers);
    const admin = createRawClient(ToolAdminService, t.address, {
      token: await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] }),
    });
    await admin.setFaults({ profile: { addedLatencyMs: 5 } });
    const error = await refusal(
      admin.setFaults({ profile: { outage: true, methods: ["Search", "search"] } }),
      CallError,
    );
    expect([error.code, error.reason]).toEqual([status.INVALID_ARGUMENT, "REQUEST_INVALID"]);
    expect(error.fieldViolations).toEqual([
      { field: "profile.methods[1]", description: "is not a method of loopguard.kb.v1.KbSearchService" },
    ]);
    expect((await admin.getFaults({})).profile).toMatchObject({ addedLatencyMs: 5, outage: false });
    admin.close();
  });

  it("answers a request with hundreds of field violations at once, naming the first ten", async () => {
    const t = await start(okHandlers);
    const admin = createRawClient(ToolAdminService, t.address, {
      token: await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] }),
    });
    const methods = Array.from({ length: 500 }, () => "");
    const error = await refusal(admin.setFaults({ profile: { methods } }, { deadline: 10_000 }), CallError);
    expect([error.code, error.reason]).toEqual([status.INVALID_ARGUMENT, "REQUEST_INVALID"]);
    expect(error.fieldViolations).toHaveLength(10);
    // 500 empty names, and one more than the 32 names a profile may hold.
    expect(error.message).toMatch(/; and 491 more$/);
    admin.close();
  });

  it("refuses a token that names several audiences, this one among them: it would be good at each", async () => {
    const t = await start(okHandlers);
    const token = await mintToken(testPersonKey("test"), {
      subject: "test",
      audience: ["kb-search", "billing"] as unknown as string,
      scopes: ["kb:read"],
    });
    const error = await refusedSearchWith(t.address, token);
    expect([error.code, error.reason]).toEqual([status.UNAUTHENTICATED, "CREDENTIALS_INVALID"]);
    expect(error.message).toContain('must name one audience, "kb-search"');
  });

  it("echoes at most 64 characters of an unknown key id", async () => {
    const t = await start(okHandlers);
    const kid = "k".repeat(20_000);
    const token = await mintToken(
      { ...testPersonKey("test"), kid },
      { subject: "test", audience: "kb-search", scopes: [] },
    );
    const error = await refusedSearchWith(t.address, token);
    expect(error.code).toBe(status.UNAUTHENTICATED);
    expect(error.message).toContain(`key ${"k".repeat(64)}… (20000 characters) is not trusted`);
    expect(error.message.length).toBeLessThan(400);
  });

  it("reports SERVING, then NOT_SERVING while draining; in-flight calls finish, new ones are refused", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const t = await start({
      search: async () => {
        await gate;
        return { hits: [SAMPLE_HIT] };
      },
    });
    const client = await t.client(["kb:read"]);
    expect(await checkHealth(t.address)).toBe("SERVING");
    expect(await checkHealth(t.address, KbSearchService.typeName)).toBe("SERVING");
    const inFlight = client.search({ query: "refund", limit: 1 });
    await sleep(100);
    const stopping = t.server.shutdown();
    await sleep(50);
    expect(await checkHealth(t.address)).toBe("NOT_SERVING");
    const refused = await refusal(client.search({ query: "refund", limit: 1 }), CallError);
    expect(refused.code).toBe(status.UNAVAILABLE);
    expect(refused.reason).toBe("SHUTTING_DOWN");
    release();
    expect((await inFlight).hits).toHaveLength(1);
    await stopping;
  });

  const bufCurl = (...args: string[]) => {
    const require = createRequire(import.meta.url);
    const buf = join(dirname(require.resolve("@bufbuild/buf/package.json")), "bin", "buf");
    return promisify(execFile)(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args]);
  };

  it("runs the service's own interceptors after auth and validation, on the contract's methods only", async () => {
    const seen: string[] = [];
    const own: Interceptor = (next) => async (call) => {
      seen.push(`${call.method.name} by ${call.caller?.subject}`);
      if ((call.request as { query: string }).query === "blocked")
        throw new ToolError(status.FAILED_PRECONDITION, "REQUEST_INVALID", "blocked by the service");
      return next(call);
    };
    const t = await start(okHandlers, { interceptors: [own] });
    const client = await t.client(["kb:read"], "agent-7");
    await client.search({ query: "refund", limit: 3 });
    const error = await refusal(client.search({ query: "blocked", limit: 3 }), CallError);
    expect([error.code, error.reason]).toEqual([status.FAILED_PRECONDITION, "REQUEST_INVALID"]);
    await refusal(client.search({ query: "", limit: 3 }), CallError);
    const admin = createRawClient(ToolAdminService, t.address, {
      token: await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] }),
    });
    await admin.getFaults({});
    admin.close();
    expect(seen).toEqual(["Search by agent-7", "Search by agent-7"]);
  });

  it("answers server reflection (buf curl lists the contract and the admin service)", async () => {
    const t = await start(okHandlers);
    const { stdout } = await bufCurl("--list-methods", `http://${t.address}`);
    expect(stdout).toContain("loopguard.kb.v1.KbSearchService/Search");
    expect(stdout).toContain("loopguard.tool.v1.ToolAdminService/SetFaults");
  });

  it("lists grpc.health.v1.Health in reflection, so the health check can be called by name", async () => {
    const t = await start(okHandlers);
    const { stdout: services } = await bufCurl("--list-services", `http://${t.address}`);
    expect(services.split("\n")).toContain("grpc.health.v1.Health");
    const { stdout: answer } = await bufCurl(
      "-d",
      JSON.stringify({ service: "loopguard.kb.v1.KbSearchService" }),
      `http://${t.address}/grpc.health.v1.Health/Check`,
    );
    expect(JSON.parse(answer)).toEqual({ status: "SERVING" });
  });
});

describe("serveTool limits: streams apart from unary calls, request sizes from the contract", () => {
  type OrchestratorHandlers = ToolHandlers<typeof OrchestratorService>;
  let orchestrator: TestTool<typeof OrchestratorService> | undefined;
  afterEach(async () => {
    await orchestrator?.close();
    orchestrator = undefined;
  });

  /** A contract with a server stream: each stream stays open until its call is cancelled or the server drains. */
  function serveWatcher(options: Record<string, number>, handled: string[] = []) {
    const unused = async (): Promise<never> => {
      throw new ToolError(status.INTERNAL, "INTERNAL_ERROR", "not used by this test");
    };
    const handlers: OrchestratorHandlers = {
      startSession: async (req) => {
        handled.push("startSession");
        return { session: { sessionId: req.goal.slice(0, 8) } };
      },
      getSession: async (req) => {
        handled.push("getSession");
        return { session: { sessionId: req.sessionId } };
      },
      async *watchSession(req, ctx) {
        yield { event: { case: "snapshot", value: { sessionId: req.sessionId } } };
        await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
      },
      listSessions: unused,
      cancelSession: unused,
      resolveApproval: unused,
      getTrace: unused,
      getOverview: unused,
      listToolStats: unused,
      getTimeSeries: unused,
      listApprovals: unused,
      getSessionDetail: unused,
      recordPatrolRun: unused,
      listPatrolRuns: unused,
    };
    return startTestTool({ service: OrchestratorService, handlers }, options);
  }

  /** Opens a stream and waits for its first message, so the server has counted it. */
  async function openStream(client: RawClient<typeof OrchestratorService>, id: string) {
    const iterator = client.watchSession({ sessionId: id })[Symbol.asyncIterator]();
    const first = await iterator.next();
    return { first, next: () => iterator.next(), close: () => iterator.return?.() };
  }

  it("serves unary calls while streams hold more than maxConcurrent; refuses streams past the server's and each caller's limit with RetryInfo", async () => {
    orchestrator = await serveWatcher({ maxConcurrent: 2, maxStreams: 5, maxStreamsPerCaller: 3 });
    const alice = await orchestrator.client(["sessions:read"], "alice");
    const bob = await orchestrator.client(["sessions:read"], "bob");
    const aliceStreams = await Promise.all([1, 2, 3].map((i) => openStream(alice, `a${i}`)));
    for (const s of aliceStreams) expect(s.first.done).toBe(false);

    const perCaller = await refusal(openStream(alice, "a4"), CallError);
    expect(perCaller.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(perCaller.reason).toBe("TOO_MANY_STREAMS");
    expect(perCaller.metadata).toMatchObject({ limit: "caller", max_streams: "3" });
    expect(perCaller.retryAfterMs).toBe(1000);
    expect(perCaller.message).toContain("alice has 3 streams open");

    const bobStreams = await Promise.all([1, 2].map((i) => openStream(bob, `b${i}`)));
    const server = await refusal(openStream(bob, "b3"), CallError);
    expect(server.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(server.metadata).toMatchObject({ limit: "server", max_streams: "5" });
    expect(orchestrator.server.openStreams()).toBe(5);

    // Five streams open, two unary slots: unary calls are neither shed nor queued behind streams.
    const answers = await Promise.all(Array.from({ length: 2 }, (_, i) => alice.getSession({ sessionId: `s${i}` })));
    expect(answers.map((a) => a.session?.sessionId)).toEqual(["s0", "s1"]);
    expect(orchestrator.server.inFlight()).toBe(0);

    await aliceStreams[0]!.close();
    for (let i = 0; i < 50 && orchestrator.server.openStreams() > 4; i += 1) await sleep(20);
    expect((await openStream(alice, "a5")).first.done).toBe(false);
    const page = await orchestrator.server.metrics.registry.metrics();
    expect(metricValue(page, "loopguard_tool_streams_refused_total", { limit: "caller" })).toBe(1);
    expect(metricValue(page, "loopguard_tool_streams_refused_total", { limit: "server" })).toBe(1);
    expect(metricValue(page, "loopguard_tool_open_streams")).toBe(5);
    for (const s of [...aliceStreams, ...bobStreams]) await s.close();
  });

  it("ends open streams at once when the server drains, with UNAVAILABLE SHUTTING_DOWN, instead of waiting out the grace period", async () => {
    orchestrator = await serveWatcher({ shutdownGraceMs: 10_000 });
    const client = await orchestrator.client(["sessions:read"]);
    const stream = await openStream(client, "s1");
    const started = Date.now();
    const ended = errorOf(stream.next());
    await orchestrator.server.shutdown();
    const error = await ended;
    expect(error).toBeInstanceOf(CallError);
    expect((error as CallError).code).toBe(status.UNAVAILABLE);
    expect((error as CallError).reason).toBe("SHUTTING_DOWN");
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("refuses a request above its method's max_request_bytes with INVALID_ARGUMENT before decoding it or calling the handler", async () => {
    const handled: string[] = [];
    orchestrator = await serveWatcher({}, handled);
    const client = await orchestrator.client(["sessions:read", "sessions:write"]);
    // GetSession declares no limit (16 KiB); StartSession declares 128 KiB in the contract.
    const big = await refusal(client.getSession({ sessionId: "x".repeat(20_000) }), CallError);
    expect(big.code).toBe(status.INVALID_ARGUMENT);
    expect(big.reason).toBe("REQUEST_TOO_LARGE");
    expect(big.message).toMatch(/^GetSessionRequest is 2000\d bytes; GetSession accepts at most 16384$/);
    expect(big.metadata).toEqual({ bytes: expect.stringMatching(/^2000\d$/), max_bytes: "16384" });
    const unauthenticated = createRawClient(OrchestratorService, orchestrator.address);
    expect((await refusal(unauthenticated.getSession({ sessionId: "x".repeat(20_000) }), CallError)).reason).toBe(
      "REQUEST_TOO_LARGE",
    );
    unauthenticated.close();
    expect((await refusal(client.startSession({ goal: "g".repeat(140_000) }), CallError)).message).toMatch(
      /StartSession accepts at most 131072$/,
    );
    expect(handled).toEqual([]);

    // Below the limit the request goes on through validation as always.
    const invalid = await refusal(client.startSession({ goal: "g".repeat(100_000) }), CallError);
    expect(invalid.reason).toBe("REQUEST_INVALID");
    expect((await client.getSession({ sessionId: "ses_1" })).session?.sessionId).toBe("ses_1");
    expect(handled).toEqual(["getSession"]);
    const page = await orchestrator.server.metrics.registry.metrics();
    expect(metricValue(page, "loopguard_tool_requests_too_large_total", { grpc_method: "GetSession" })).toBe(2);
    expect(
      metricValue(page, "grpc_server_handled_total", { grpc_method: "StartSession", grpc_code: "INVALID_ARGUMENT" }),
    ).toBe(2);
  });

  it("refuses bytes that are no request of the method's type with INVALID_ARGUMENT REQUEST_INVALID, counted, without calling the handler", async () => {
    const handled: string[] = [];
    orchestrator = await serveWatcher({}, handled);
    const token = await testToken({ scopes: ["sessions:read"], audience: "orchestrator" });
    const raw = new Client(orchestrator.address, credentials.createInsecure());
    const send = (body: Buffer, metadata: Metadata) =>
      new Promise<ServiceError>((resolve, reject) =>
        raw.makeUnaryRequest(
          "/loopguard.orchestrator.v1.OrchestratorService/GetSession",
          (b: Buffer) => b,
          (b: Buffer) => b,
          body,
          metadata,
          (error) => (error ? resolve(error) : reject(new Error("the server answered bytes that are no request"))),
        ),
      );
    const authorized = new Metadata();
    authorized.set("authorization", `Bearer ${token}`);
    try {
      // Field 1 (session_id) says 200 bytes follow and one does; then a wire type protobuf does not have.
      for (const body of [Buffer.from([0x0a, 0xc8, 0x01, 0x41]), Buffer.from([0x0f, 0x01])]) {
        for (const metadata of [authorized, new Metadata()]) {
          const error = await send(body, metadata);
          expect(error.code).toBe(status.INVALID_ARGUMENT);
          expect(decodeStatusDetails(error).reason).toBe("REQUEST_INVALID");
          expect(error.details).toBe(
            `the request's ${body.length} bytes are not a GetSessionRequest in protobuf's binary form`,
          );
        }
      }
    } finally {
      raw.close();
    }
    expect(handled).toEqual([]);
    const page = await orchestrator.server.metrics.registry.metrics();
    expect(
      metricValue(page, "grpc_server_handled_total", { grpc_method: "GetSession", grpc_code: "INVALID_ARGUMENT" }),
    ).toBe(4);
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "GetSession", grpc_code: "INTERNAL" })).toBe(
      0,
    );
  });
});
