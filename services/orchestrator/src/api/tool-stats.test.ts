import type { DescService } from "@bufbuild/protobuf";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { ClientMetrics, type ToolClient, toolClient } from "@loopguard/tool-sdk";
import { Registry } from "prom-client";
import { afterAll, describe, expect, it } from "vitest";
import { SessionMetrics } from "../governance/session-metrics.js";
import { toolStats } from "./tool-stats.js";

const registry = new Registry();
const clientMetrics = new ClientMetrics(registry);
const sessionMetrics = new SessionMetrics(registry);
const clients = new Map<string, ToolClient<DescService>>(
  [KbSearchService, RiskService].map((service) => {
    const client = toolClient(service, { target: "127.0.0.1:1", metrics: clientMetrics }) as ToolClient<DescService>;
    return [client.tool, client];
  }),
);
afterAll(() => {
  for (const client of clients.values()) client.close();
});

describe("toolStats", () => {
  it("fallbacks served counts the client's cached answers and the host's degraded answers, each once", async () => {
    const call = (outcome: string) => clientMetrics.calls.inc({ tool: "kb-search", method: "Search", outcome });
    const observed = (tool: string, served_from: string) =>
      sessionMetrics.toolResults.inc({ tool, outcome: "ok", served_from });
    call("ok");
    observed("kb_search_search", "live");
    // The tool down: one call answered from the client's cache, one failed and the host stood in.
    call("fallback_cache");
    observed("kb_search_search", "cache");
    call("error");
    observed("kb_search_search", "degraded");
    observed("risk_query_risk", "degraded");

    const stats = await toolStats(registry, clients);
    const kb = stats.find((t) => t.tool === "kb-search");
    expect(kb).toMatchObject({ calls: 3, fallbacksServed: 2 });
    expect(stats.find((t) => t.tool === "risk")?.fallbacksServed).toBe(1);
  });

  it("a tool not called yet has no outcomes, though its series are exported at 0 from its client's start", async () => {
    expect(await registry.getSingleMetricAsString("loopguard_tool_client_calls_total")).toMatch(/tool="risk".* 0$/m);
    const risk = (await toolStats(registry, clients)).find((t) => t.tool === "risk");
    expect([risk?.calls, risk?.outcomes]).toEqual([0, {}]);
  });
});
