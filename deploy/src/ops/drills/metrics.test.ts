import { createServer, type RequestListener } from "node:http";
import type { AddressInfo } from "node:net";
import { parseMetrics } from "@loopguard/tool-sdk";
import { afterEach, describe, expect, it } from "vitest";
import {
  breakerTransitions,
  growth,
  MetricsSampler,
  podPages,
  prometheusPages,
  type Snapshot,
  toolCallFigures,
} from "./metrics.js";

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

  it("counts a call refused as ANSWER_TOO_LARGE (INTERNAL, no fallback) as failed, as game-day.md defines calls_failed", () => {
    const tooLarge = (n: number) => `
# TYPE loopguard_tool_client_calls_total counter
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="ok",grpc_code="OK"} 10
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="answer_too_large",grpc_code="INTERNAL"} ${n}
`;
    const figures = toolCallFigures(
      snapshot(["orchestrator-0", tooLarge(0)]),
      snapshot(["orchestrator-0", tooLarge(7)]),
      "kb-search",
      "loopguard.kb.v1.KbSearchService",
    );
    // 7 calls offered, none answered, none fell back: they failed.
    expect(figures).toMatchObject({
      offered: 7,
      fallbacks: 0,
      failed: 7,
      failures: { "answer_too_large INTERNAL": 7 },
    });
  });

  it("counts the host's degraded answers as fallbacks served, not as failed calls", () => {
    const downPage = (failed: number, degraded: number) => `
# TYPE loopguard_tool_client_calls_total counter
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="ok",grpc_code="OK"} 10
loopguard_tool_client_calls_total{tool="kb-search",method="Search",outcome="error",grpc_code="UNAVAILABLE"} ${failed}
# TYPE loopguard_session_tool_results_total counter
loopguard_session_tool_results_total{tool="kb_search_search",outcome="ok",served_from="degraded"} ${degraded}
loopguard_session_tool_results_total{tool="kb_search_search",outcome="ok",served_from="live"} 10
loopguard_session_tool_results_total{tool="risk_get_customer_risk",outcome="ok",served_from="degraded"} ${degraded}
`;
    const figures = toolCallFigures(
      snapshot(["orchestrator-0", downPage(0, 0)]),
      snapshot(["orchestrator-0", downPage(8, 3)]),
      "kb-search",
      "loopguard.kb.v1.KbSearchService",
      ["kb_search_search"],
    );
    // 8 calls failed at the client; the host answered 3 of them with kb-search's degraded answer.
    expect(figures).toMatchObject({ offered: 8, fallbacks: 3, failed: 5, failures: { "error UNAVAILABLE": 8 } });
  });
});

const servers: ReturnType<typeof createServer>[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

/** A local page server; `answer` can be changed while it runs. */
async function serve(answer: { handle: RequestListener }): Promise<string> {
  const server = createServer((req, res) => answer.handle(req, res));
  servers.push(server);
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const metricsPage = (offered: number) => ({
  handle: ((_, res) => res.end(page(offered, offered, 0))) as RequestListener,
});
const status503 = { handle: ((_, res) => res.writeHead(503).end("not ready")) as RequestListener };

describe("drill metrics sampler: no figures is no clean run", () => {
  it("refuses to measure when the first read reaches no orchestrator page (connection refused)", async () => {
    // Port 1 on loopback: nothing listens.
    const sampler = new MetricsSampler(podPages(() => new Map([["orchestrator-0", "http://127.0.0.1:1/metrics"]])));
    await expect(sampler.sample()).rejects.toThrow(
      /^the drill cannot measure the orchestrators' figures: read 0 of 1 orchestrator pages; orchestrator-0 /,
    );
  });

  it("refuses to measure when every orchestrator answers /metrics with an error status", async () => {
    const url = await serve(status503);
    const sampler = new MetricsSampler(podPages(() => new Map([["orchestrator-0", `${url}/metrics`]])));
    await expect(sampler.sample()).rejects.toThrow(/orchestrator-0 .*: HTTP 503/);
  });

  it("refuses to measure when one of the replicas cannot be read at the first read", async () => {
    const [good, bad] = await Promise.all([serve(metricsPage(10)), serve(status503)]);
    const urls = new Map([
      ["orchestrator-0", `${good}/metrics`],
      ["orchestrator-1", `${bad}/metrics`],
    ]);
    await expect(new MetricsSampler(podPages(() => urls)).sample()).rejects.toThrow(/read 1 of 2 orchestrator pages/);
  });

  it("refuses to measure when Prometheus answers the figures query with no series (job or metric renamed)", async () => {
    const url = await serve({
      handle: (_, res) => res.end(JSON.stringify({ status: "success", data: { resultType: "vector", result: [] } })),
    });
    const sampler = new MetricsSampler(prometheusPages(url, "loopguard", "orchestrator"));
    await expect(sampler.sample()).rejects.toThrow(/has no series of job "orchestrator" in namespace "loopguard"/);
  });

  it("once under way, keeps a replica's last page when it stops answering and takes the others' fresh ones", async () => {
    const a = metricsPage(10);
    const b = metricsPage(4);
    const urls = new Map([
      ["orchestrator-0", `${await serve(a)}/metrics`],
      ["orchestrator-1", `${await serve(b)}/metrics`],
    ]);
    const sampler = new MetricsSampler(podPages(() => urls));
    const first = await sampler.sample();
    a.handle = metricsPage(30).handle;
    b.handle = status503.handle;
    const second = await sampler.sample();
    expect(toolCallFigures(first, second, "kb-search", "loopguard.kb.v1.KbSearchService").offered).toBe(20);
    expect([...second.pages.keys()].sort()).toEqual(["orchestrator-0", "orchestrator-1"]);
  });
});
