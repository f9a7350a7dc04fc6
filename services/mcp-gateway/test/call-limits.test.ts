// The gateway's own bounds on what it follows, in process over real HTTP and gRPC: a stand-in
// orchestrator (the real contract over loopback) whose sessions never settle, so only the
// gateway's limits end a call.
import { request } from "node:http";
import { ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { singleCallScopes } from "@loopguard/orchestrator/single-call";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createLogger, createRawClient, status, ToolError, type ToolHandlers } from "@loopguard/tool-sdk";
import { startTestTool, type TestTool, testToken, testVerifier } from "@loopguard/tool-sdk/testing";
import { bulkhead } from "cockatiel";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type McpHttp, serveMcpHttp } from "../src/http.js";

let started = 0;
let polls = 0;
/** When each start and each poll arrived. */
let startTimes: number[] = [];
let pollTimes: number[] = [];
/** The idempotency key of each start, and what the next starts and polls fail with (then succeed). */
let keys: string[] = [];
let failStarts: ToolError[] = [];
let failPolls: ToolError[] = [];
let orchestrator: TestTool<typeof OrchestratorService>;
let gateway: McpHttp;
let token: string;
const logs: Record<string, unknown>[] = [];

/** The orchestrator's contract, every method but the two the gateway calls refused. */
function standIn(): ToolHandlers<typeof OrchestratorService> {
  const unused = async (): Promise<never> => {
    throw new ToolError(status.UNIMPLEMENTED, "INTERNAL_ERROR", "not used by this test");
  };
  return {
    ...(Object.fromEntries(OrchestratorService.methods.map((m) => [m.localName, unused])) as unknown as ToolHandlers<
      typeof OrchestratorService
    >),
    startSession: async (req) => {
      keys.push(req.idempotencyKey);
      startTimes.push(Date.now());
      const failure = failStarts.shift();
      // As the orchestrator does: a key it has seen gets the session it made, not a second one.
      if (keys.indexOf(req.idempotencyKey) === keys.length - 1) started += 1;
      if (failure) throw failure;
      return { session: { sessionId: `ses_${started}`, state: SessionState.THINKING } };
    },
    getSession: async (req) => {
      polls += 1;
      pollTimes.push(Date.now());
      const failure = failPolls.shift();
      if (failure) throw failure;
      return { session: { sessionId: req.sessionId, state: SessionState.THINKING } };
    },
  };
}

beforeAll(async () => {
  orchestrator = await startTestTool({ service: OrchestratorService, handlers: standIn() });
  token = await testToken({
    subject: "mcp-client",
    scopes: ["sessions:read", "sessions:write"],
    audience: "orchestrator",
  });
  const registry = new ToolRegistry();
  gateway = await serveMcpHttp(
    {
      api: createRawClient(OrchestratorService, orchestrator.address),
      tools: registry.list(),
      scopesOf: singleCallScopes(registry),
      orchestratorAddr: orchestrator.address,
      waitMs: 3000,
      calls: bulkhead(2),
      log: createLogger({ service: "mcp-gateway", write: (line) => logs.push(JSON.parse(line)) }),
      verifier: testVerifier("orchestrator"),
    },
    "127.0.0.1",
    0,
    16,
  );
});
afterAll(async () => {
  await gateway.close();
  await orchestrator.close();
});
beforeEach(() => {
  started = 0;
  polls = 0;
  keys = [];
  startTimes = [];
  pollTimes = [];
  failStarts = [];
  failPolls = [];
});

const search = (id: number) => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name: "kb_search_search", arguments: { query: "refund policy", limit: 1 } },
});

/** POSTs `body` to /mcp; with `leaveOnce`, the client goes away, before an answer, as soon as that holds. */
function post(body: unknown, leaveOnce?: () => boolean): Promise<string> {
  const port = gateway.address.split(":").at(-1);
  return new Promise((resolve) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path: "/mcp",
        method: "POST",
        headers: {
          authorization: `Bearer ${token}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
        },
      },
      (res) => {
        let text = "";
        res.on("data", (chunk: Buffer) => {
          text += chunk.toString();
        });
        res.on("end", () => resolve(text));
      },
    );
    req.on("error", () => resolve(""));
    req.end(JSON.stringify(body));
    if (leaveOnce) {
      const watch = setInterval(() => leaveOnce() && req.destroy(), 10);
      req.on("close", () => clearInterval(watch));
    }
  });
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the gateway's limits", () => {
  it("stops following a session once its client has gone, and frees the call's place", async () => {
    // It leaves once its session is followed: on a loaded machine the first start may take longer than any fixed time.
    await post(search(1), () => polls > 0);
    await pause(200);
    const after = polls;
    await pause(1000);
    expect(started).toBe(1);
    expect(after).toBeGreaterThan(0);
    expect(polls - after).toBeLessThanOrEqual(1);
    expect(logs.some((l) => l.msg === "mcp call abandoned by its client")).toBe(true);
    // Both places are free again: two calls run (and wait out the 3 s), a third is refused.
    const answers = JSON.parse(await post([search(1), search(2), search(3)])) as { result: { isError?: boolean } }[];
    expect(answers.map((a) => a.result.isError === true).sort()).toEqual([false, false, true]);
  });

  it("runs at most its limit of calls at once, a batch included: the rest start nothing and say GATEWAY_BUSY", async () => {
    const answers = JSON.parse(await post(Array.from({ length: 6 }, (_, i) => search(i + 1)))) as {
      result: { isError?: boolean; structuredContent: { error?: { reason: string } } };
    }[];
    expect(started).toBe(2);
    const busy = answers.filter((a) => a.result.isError);
    expect(busy).toHaveLength(4);
    for (const a of busy) expect(a.result.structuredContent.error?.reason).toBe("GATEWAY_BUSY");
  });
});

describe("a call whose session the orchestrator made", () => {
  type Answer = {
    result: { isError?: boolean; content: { text: string }[]; structuredContent: Record<string, unknown> };
  };
  const unavailable = () =>
    new ToolError(status.UNAVAILABLE, "STORE_UNAVAILABLE", "the session store cannot serve right now");

  it("tries a start that failed on the way again with the same idempotency key, so it makes one session", async () => {
    failStarts = [unavailable()];
    const answer = JSON.parse(await post(search(1))) as Answer;
    expect(started).toBe(1);
    expect(keys).toHaveLength(2);
    expect(new Set(keys).size).toBe(1);
    expect(answer.result.structuredContent.sessionId).toBe("ses_1");
  });

  it("rides out a poll that failed on the way, and names the session when a poll is refused: a retry would start another", async () => {
    failPolls = [unavailable(), unavailable()];
    const rode = JSON.parse(await post(search(1))) as Answer;
    expect(rode.result.structuredContent).toMatchObject({ sessionId: "ses_1", state: "THINKING" });
    expect(rode.result.structuredContent.followError).toBeUndefined();
    failPolls = [new ToolError(status.UNAUTHENTICATED, "CREDENTIALS_INVALID", "the bearer token expired")];
    const lost = JSON.parse(await post(search(2))) as Answer;
    expect(started).toBe(2);
    expect(lost.result.isError).toBeUndefined();
    expect(lost.result.structuredContent).toMatchObject({
      sessionId: "ses_2",
      followError: { code: "UNAUTHENTICATED", reason: "CREDENTIALS_INVALID" },
    });
    expect(lost.result.content[0]!.text).toMatch(/^Not done yet: session ses_2 was started .*Do not call again/);
  });
});

describe("the orchestrator asking for time (RetryInfo)", () => {
  type Answer = { result: { isError?: boolean; content: { text: string }[] } };
  const storeDown = (retryAfterMs: number) =>
    new ToolError(status.UNAVAILABLE, "STORE_UNAVAILABLE", "the session store cannot serve right now", {
      retryAfterMs,
    });
  const gaps = (times: number[]) => times.slice(1).map((t, i) => t - times[i]!);

  it("answers the caller's quota of sessions at once: it frees up as sessions end, not within the wait", async () => {
    failStarts = [
      new ToolError(status.RESOURCE_EXHAUSTED, "SESSION_QUOTA_EXCEEDED", "mcp-client has 2000 sessions in flight", {
        retryAfterMs: 5000,
      }),
    ];
    const answer = JSON.parse(await post(search(1))) as Answer;
    expect(keys).toHaveLength(1);
    expect(answer.result.isError).toBe(true);
    expect(answer.result.content[0]!.text).toMatch(/^RESOURCE_EXHAUSTED SESSION_QUOTA_EXCEEDED: /);
  });

  it("waits as long as it asked before starting again", async () => {
    failStarts = [storeDown(700), storeDown(700)];
    const answer = JSON.parse(await post(search(1))) as Answer;
    expect(answer.result.isError).toBeUndefined();
    expect(keys).toHaveLength(3);
    for (const gap of gaps(startTimes)) expect(gap).toBeGreaterThanOrEqual(690);
  });

  it("gives up at once when it asks for longer than the wait has left", async () => {
    failStarts = [storeDown(5000)];
    const answer = JSON.parse(await post(search(1))) as Answer;
    expect(keys).toHaveLength(1);
    expect(answer.result.content[0]!.text).toMatch(/^UNAVAILABLE STORE_UNAVAILABLE: /);
  });

  it("waits as long as it asked before looking at the session again", async () => {
    failPolls = [storeDown(700)];
    await post(search(1));
    expect(gaps(pollTimes)[0]).toBeGreaterThanOrEqual(690);
  });
});
