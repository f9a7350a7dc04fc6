import { describe, expect, it } from "vitest";
import { parseMetrics } from "@loopguard/tool-sdk";
import { breakerTransitions, growth, type Snapshot, toolCallFigures } from "./metrics.js";

const page = (offered: number, attempts: number, opened: number) => `
# HELP loopguard_tool_client_calls_total Tool calls by outcome.
# TYPE loopguard_tool_client_calls_total counter
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="ok",grpc_code="OK"} ${offered - 3}
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="fallback_cache",grpc_code="UNAVAILABLE"} 2
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="breaker_rejected",grpc_code="UNAVAILABLE"} 1
loopguard_tool_client_calls_total{tool="billing",method="Refund",outcome="ok",grpc_code="OK"} 7
# TYPE grpc_client_handled_total counter
grpc_client_handled_total{grpc_type="unary",grpc_service="loopguard.kb.v1.KbSearchService",grpc_method="Search",grpc_code="OK"} ${attempts}
# TYPE loopguard_tool_breaker_transitions_total counter
loopguard_tool_breaker_transitions_total{tool="kb-search",state="open"} ${opened}
# TYPE grpc_client_handling_seconds histogram
grpc_client_handling_seconds_bucket{le="0.1"} 3
grpc_client_handling_seconds_sum 0.2
grpc_client_handling_seconds_count 3
`;

const snapshot = (...pages: [string, string][]): Snapshot => ({
  at: 0,
  pages: new Map(pages.map(([pod, text]) => [pod, parseMetrics(text)])),
});

describe("drill metrics", () => {
  it("reads counters by labels and keeps a histogram's series under their own names", () => {
    const samples = parseMetrics(page(10, 12, 0));
    expect(samples.filter((s) => s.name === "loopguard_tool_client_calls_total")).toHaveLength(4);
    expect(samples.some((s) => s.name === "grpc_client_handling_seconds")).toBe(false);
    expect(samples.filter((s) => s.name.startsWith("grpc_client_handling_seconds_")).map((s) => s.name)).toEqual([
      "grpc_client_handling_seconds_bucket",
      "grpc_client_handling_seconds_sum",
      "grpc_client_handling_seconds_count",
    ]);
  });

  it("sums a tool's figures over every orchestrator replica as growth between two snapshots", () => {
    const from = snapshot(["orchestrator-0", page(10, 12, 0)], ["orchestrator-1", page(4, 4, 0)]);
    const to = snapshot(["orchestrator-0", page(30, 40, 1)], ["orchestrator-1", page(9, 10, 2)]);
    expect(toolCallFigures(from, to, "kb-search", "loopguard.kb.v1.KbSearchService")).toEqual({
      offered: 25,
      attempts: 34,
      fallbacks: 0,
      failed: 0,
      failures: {},
    });
    expect(breakerTransitions(from, to, "kb-search")).toEqual({ open: 3 });
    expect(growth(from, to, "loopguard_tool_client_calls_total", { tool: "billing" })).toBe(0);
  });
});
