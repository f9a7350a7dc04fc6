// Where a hedge goes, against real kb-search replicas on loopback: never to the replica its first
// attempt is waiting on, whose address the balancer reports when it starts the attempt (grpc-js's
// getPeer() says "unknown" until the server answers, which for a slow replica is after the hedge delay).
import { setTimeout as sleep } from "node:timers/promises";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import type { ToolClientOptions } from "../src/client/plan.js";
import { toolClient } from "../src/client/tool-client.js";
import { metricValue, startTestTool, type TestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A fixed hedge delay: the observed p95 needs more answers than a test makes. */
const HEDGE = { fallbackDelayMs: 250, minSamples: 10_000 };

/** Which replica (by index) each query reached, in order. */
type Arrivals = { query: string; replica: number }[];

/** Replicas where the first arrival of a query starting "hang" waits 700 ms (a cancel cuts it short). */
async function kbReplicas(n: number, arrivals: Arrivals) {
  const tools = [];
  for (let replica = 0; replica < n; replica++) {
    const tool = await startTestTool({
      service: KbSearchService,
      handlers: {
        search: async (req, ctx) => {
          arrivals.push({ query: req.query, replica });
          if (req.query.startsWith("hang") && arrivals.filter((a) => a.query === req.query).length === 1)
            await sleep(700, undefined, { signal: ctx.signal }).catch(() => undefined);
          return {
            hits: [
              { docId: `doc-${replica}`, version: 1, title: req.query, snippet: "…", score: 1, category: "policy" },
            ],
          };
        },
      },
    });
    cleanups.push(() => tool.close());
    tools.push(tool);
  }
  return tools;
}

async function kbClient(tools: TestTool<typeof KbSearchService>[], overrides: Partial<ToolClientOptions> = {}) {
  const registry = new Registry();
  const client = toolClient(KbSearchService, {
    target: tools.map((t) => t.address),
    token: await testToken({ subject: "orchestrator", scopes: ["kb:read"] }),
    registry,
    random: () => 0,
    hedge: HEDGE,
    ...overrides,
  });
  cleanups.push(() => client.close());
  // Every replica answers once, so the client knows each address.
  for (let i = 0; i < 2 * tools.length; i++) await client.call("search", { query: `warm ${i}`, limit: 1 });
  return { client, registry };
}

const hedgesOf = async (registry: Registry, name = "loopguard_tool_client_hedges_total") =>
  metricValue(await registry.metrics(), name, { tool: "kb-search", method: "Search" });

describe("where a hedge goes", () => {
  it("sends no hedge when the slow attempt's replica is the only one", async () => {
    const arrivals: Arrivals = [];
    const tools = await kbReplicas(1, arrivals);
    const { client, registry } = await kbClient(tools);
    const result = await client.call("search", { query: "hang alone", limit: 1 });
    expect(result).toMatchObject({ source: "live", attempts: 1, hedged: false, winningAttempt: 1 });
    expect(arrivals.filter((a) => a.query === "hang alone")).toHaveLength(1);
    expect(await hedgesOf(registry)).toBe(0);
  });

  it("sends no hedge when the other replica that answered before is down now: no attempt, budget token or hedge counted", async () => {
    const arrivals: Arrivals = [];
    const tools = await kbReplicas(2, arrivals);
    const { client, registry } = await kbClient(tools);
    await tools[1]!.close();
    // The channel hears the replica go (its connection closed), as it would a pod killed.
    await sleep(200);
    const result = await client.call("search", { query: "hang one left", limit: 1 });
    expect(result).toMatchObject({ source: "live", attempts: 1, hedged: false, winningAttempt: 1 });
    expect(arrivals.filter((a) => a.query === "hang one left").map((a) => a.replica)).toEqual([0]);
    expect(await hedgesOf(registry)).toBe(0);
  });

  it("sends the hedge to the other replica, whichever the first attempt waits on and whatever other calls pick", async () => {
    const arrivals: Arrivals = [];
    const tools = await kbReplicas(2, arrivals);
    const { client } = await kbClient(tools, {
      hedge: { ...HEDGE, lossesToAvoid: 1000 },
      retry: { budgetMaxTokens: 100 },
    });
    for (let trial = 0; trial < 6; trial++) {
      const hanging = client.call("search", { query: `hang ${trial}`, limit: 1 });
      // Takes the next pick of round robin, so a hedge that merely moved on would land on the hanging replica.
      await client.call("search", { query: `fast ${trial}`, limit: 1 });
      const result = await hanging;
      const reached = arrivals.filter((a) => a.query === `hang ${trial}`).map((a) => a.replica);
      expect({ trial, reached, hedged: result.hedged, winner: result.winningAttempt }).toEqual({
        trial,
        reached: [reached[0], 1 - reached[0]!],
        hedged: true,
        winner: 2,
      });
      expect(result.response.hits[0]?.docId).toBe(`doc-${1 - reached[0]!}`);
    }
  });
});
