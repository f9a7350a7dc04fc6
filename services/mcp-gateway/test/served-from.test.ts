// What an MCP client sees of an answer its tool did not give live, through the SDK's own client:
// a stand-in orchestrator whose one-call session ends DONE with the envelope the host builds for a
// live, a cached and a degraded kb-search answer (send.ts's fallbackWords).
import { ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { singleCallScopes } from "@loopguard/orchestrator/single-call";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createLogger } from "@loopguard/tool-sdk";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { bulkhead } from "cockatiel";
import { describe, expect, it } from "vitest";
import { createGatewayServer } from "../src/gateway.js";

const HITS = { hits: [{ docId: "refund-policy", version: 3, title: "Refunds" }] };
const observedAt = "2026-12-02T10:00:00.000Z";
const LIVE = { ok: true, data: HITS, refs: ["kb:refund-policy@3"], costMicros: 100, servedFrom: "live", observedAt };
const CACHED = {
  ...LIVE,
  servedFrom: "cache",
  ageMs: 14 * 60_000,
  note: `kb-search is unavailable now (UNAVAILABLE); this is its answer from 14 minutes ago, as of ${observedAt}`,
};
const DEGRADED_NOTE =
  "kb-search was unavailable (UNAVAILABLE BREAKER_OPEN); this is its declared empty answer, not a finding: say that kb-search could not be consulted";
const DEGRADED = {
  ok: true,
  data: {},
  refs: [],
  costMicros: 100,
  servedFrom: "degraded",
  observedAt,
  note: DEGRADED_NOTE,
};

/** Calls kb_search_search through the gateway, its session answered with `envelope`. */
async function search(envelope: object, outcome = "succeeded"): Promise<CallToolResult> {
  const session = {
    sessionId: "ses_1",
    state: SessionState.DONE,
    stopReason: "done",
    answer: JSON.stringify(envelope),
    outcome: { kind: outcome, reason: "" },
    traceId: "0".repeat(32),
  };
  const registry = new ToolRegistry();
  const server = createGatewayServer({
    api: { startSession: async () => ({ session }), getSession: async () => ({ session }) } as never,
    tools: registry.list(),
    tokenFor: async () => "token",
    scopesOf: singleCallScopes(registry),
    orchestratorAddr: "127.0.0.1:1",
    waitMs: 1000,
    calls: bulkhead(1),
    log: createLogger({ service: "mcp-gateway", write: () => undefined }),
  });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: "loopguard-test", version: "1.0.0" });
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  try {
    return (await client.callTool({
      name: "kb_search_search",
      arguments: { query: "refund policy" },
    })) as CallToolResult;
  } finally {
    await client.close();
  }
}

const textOf = (result: CallToolResult) => (result.content[0] as { text: string }).text;

describe("where a tool's answer came from, as an MCP client sees it", () => {
  it("a live answer is the tool's data alone", async () => {
    const result = await search(LIVE);
    expect(result.isError).toBeFalsy();
    expect(textOf(result)).toBe(JSON.stringify(HITS));
    expect(result.structuredContent).toEqual({
      sessionId: "ses_1",
      state: "DONE",
      outcome: "succeeded",
      traceId: "0".repeat(32),
      result: HITS,
      refs: ["kb:refund-policy@3"],
      servedFrom: "live",
    });
  });

  it("a cached answer is the tool's data, its text opening with the host's note and age", async () => {
    const result = await search(CACHED);
    expect(result.isError).toBeFalsy();
    expect(textOf(result)).toBe(`served from cache: ${CACHED.note}\n${JSON.stringify(HITS)}`);
    expect(result.structuredContent).toMatchObject({
      result: HITS,
      servedFrom: "cache",
      note: CACHED.note,
      observedAt,
      ageMs: 14 * 60_000,
    });
  });

  it("a degraded stand-in is an error result saying so, not an empty finding", async () => {
    const result = await search(DEGRADED, "partial");
    expect(result.isError).toBe(true);
    expect(textOf(result)).toBe(`degraded: ${DEGRADED_NOTE}`);
    expect(result.structuredContent).toMatchObject({ outcome: "partial", servedFrom: "degraded", note: DEGRADED_NOTE });
    expect(result.structuredContent).not.toHaveProperty("result");
  });
});
