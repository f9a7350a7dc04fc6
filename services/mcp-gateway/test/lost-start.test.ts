// A start the orchestrator made whose answer was lost, then an orchestrator away for longer than the
// call's wait: the client must hear that a session may exist, with the key to resume it by, not
// "nothing happened". A loopback TCP proxy stands between the gateway and a stand-in orchestrator
// (the real contract), so the lost answer and the outage are real gRPC transport failures.
import { connect, createServer, type Server, type Socket } from "node:net";
import { ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { singleCallScopes } from "@loopguard/orchestrator/single-call";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createLogger, createRawClient, status, ToolError, type ToolHandlers } from "@loopguard/tool-sdk";
import { startTestTool, type TestTool, testToken, testVerifier } from "@loopguard/tool-sdk/testing";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { type CallToolResult, ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { bulkhead } from "cockatiel";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type McpHttp, serveMcpHttp } from "../src/http.js";

const META_KEY = "loopguard/idempotency-key";
/** Sessions the stand-in made, by idempotency key. */
const sessions = new Map<string, string>();
/** Set: the next start is made, and the orchestrator goes away before its answer gets out. */
let loseNextAnswer = false;
let orchestrator: TestTool<typeof OrchestratorService>;
let gateway: McpHttp;
let client: Client;
let proxy: Server | undefined;
let proxyPort = 0;
const open = new Set<Socket>();

function standIn(): ToolHandlers<typeof OrchestratorService> {
  const unused = async (): Promise<never> => {
    throw new ToolError(status.UNIMPLEMENTED, "INTERNAL_ERROR", "not used by this test");
  };
  const session = (sessionId: string) => ({
    sessionId,
    state: SessionState.AWAITING_APPROVAL,
    createdBy: "mcp-client",
  });
  return {
    ...(Object.fromEntries(OrchestratorService.methods.map((m) => [m.localName, unused])) as unknown as ToolHandlers<
      typeof OrchestratorService
    >),
    startSession: async (req) => {
      // As the orchestrator does: a key it has seen gets the session it made.
      const id = sessions.get(req.idempotencyKey) ?? `ses_${sessions.size + 1}`;
      sessions.set(req.idempotencyKey, id);
      if (loseNextAnswer) {
        loseNextAnswer = false;
        proxyDown();
      }
      return { session: session(id) };
    },
    getSession: async (req) => ({ session: session(req.sessionId) }),
  };
}

/** The orchestrator's address as the gateway sees it: relayed, or refused (nothing listens). */
function proxyUp(): Promise<void> {
  const upstreamPort = Number(orchestrator.address.split(":").at(-1));
  proxy = createServer((downstream) => {
    const upstream = connect(upstreamPort, "127.0.0.1");
    for (const socket of [downstream, upstream]) {
      open.add(socket);
      socket.on("error", () => socket.destroy()).on("close", () => open.delete(socket));
    }
    downstream.pipe(upstream).pipe(downstream);
    downstream.on("close", () => upstream.destroy());
    upstream.on("close", () => downstream.destroy());
  });
  return new Promise((listening) => {
    proxy!.listen(proxyPort, "127.0.0.1", () => {
      proxyPort = (proxy!.address() as { port: number }).port;
      listening();
    });
  });
}

function proxyDown(): void {
  proxy?.close();
  for (const socket of open) socket.destroy();
  open.clear();
}

beforeAll(async () => {
  orchestrator = await startTestTool({ service: OrchestratorService, handlers: standIn() });
  await proxyUp();
  const registry = new ToolRegistry();
  gateway = await serveMcpHttp(
    {
      api: createRawClient(OrchestratorService, `127.0.0.1:${proxyPort}`),
      tools: registry.list(),
      scopesOf: singleCallScopes(registry),
      orchestratorAddr: `127.0.0.1:${proxyPort}`,
      waitMs: 2000,
      calls: bulkhead(8),
      log: createLogger({ service: "mcp-gateway", write: () => undefined }),
      verifier: testVerifier("orchestrator"),
    },
    "127.0.0.1",
    0,
    16,
  );
  const token = await testToken({
    subject: "mcp-client",
    scopes: ["sessions:read", "sessions:write"],
    audience: "orchestrator",
  });
  client = new Client({ name: "loopguard-test", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`http://${gateway.address}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    }),
  );
});
afterAll(async () => {
  await client.close();
  await gateway.close();
  proxyDown();
  await orchestrator.close();
});

const refund = {
  name: "billing_refund",
  arguments: { orderId: "ord_DEMO00000001", amountCents: 500, reason: "REFUND_REASON_DAMAGED" },
};
const call = async (request: Parameters<Client["callTool"]>[0]) => (await client.callTool(request)) as CallToolResult;

describe("a start whose answer was lost, the orchestrator then away past the wait", () => {
  let key = "";

  it("is answered as a session that may have been started, with its idempotency key and how to look", async () => {
    loseNextAnswer = true;
    const lost = await call(refund);
    expect(sessions.size).toBe(1);
    expect(lost.isError).toBe(true);
    const text = (lost.content[0] as { text: string }).text;
    expect(text).toContain("a session may have been started");
    expect(text).toContain("pnpm loopguard sessions");
    expect(text).toContain(META_KEY);
    expect(lost.structuredContent).toMatchObject({ maybeStarted: true, error: { code: "UNAVAILABLE" } });
    key = (lost.structuredContent as { idempotencyKey: string }).idempotencyKey;
    expect([...sessions.keys()]).toEqual([key]);
  });

  it("called again with that key in _meta, follows the session it started rather than starting another", async () => {
    await proxyUp();
    const resumed = await call({ ...refund, _meta: { [META_KEY]: key } });
    expect(resumed.structuredContent).toMatchObject({ sessionId: "ses_1", state: "AWAITING_APPROVAL" });
    expect(sessions.size).toBe(1);
  });

  it("starts a call with the client's own key, as it sent it", async () => {
    const own = "client-key:0001.refund_a";
    const answer = await call({ ...refund, _meta: { [META_KEY]: own } });
    expect(answer.structuredContent).toMatchObject({ sessionId: "ses_2" });
    expect(sessions.get(own)).toBe("ses_2");
  });

  it.each([
    ["too short", "short"],
    ["with a character the orchestrator refuses", "client key with spaces"],
    ["not a string", 1234567890123456],
  ])("refuses a key %s as InvalidParams naming the field, starting nothing", async (_, bad) => {
    const before = sessions.size;
    const refused = await call({ ...refund, _meta: { [META_KEY]: bad } }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as McpError).code).toBe(ErrorCode.InvalidParams);
    expect((refused as McpError).message).toContain(`_meta.${META_KEY}`);
    expect(sessions.size).toBe(before);
  });
});
