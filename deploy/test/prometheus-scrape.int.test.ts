// A real Prometheus server scrapes the local suite as real processes while sessions run, and
// the generated SLO rules load and evaluate against what the services actually export.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { DEFAULT_TOOL_SERVICES } from "@loopguard/orchestrator/tool-registry";
import { freePort, kill, type ServiceProcess } from "@loopguard/test-kit";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import {
  SESSION_OPERATOR_SCOPES,
  spawnTool,
  startTool,
  testOrchestratorEnv,
  testToken,
} from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentRuleGroup } from "../src/manifests/agent-rules.js";
import { committedRuleFiles, localScrapeConfig } from "../src/manifests/prometheus-files.js";
import { toYaml } from "../src/manifests/yaml.js";
import { findExecutable } from "./promtool.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const prometheusBinary = findExecutable("prometheus");
if (!prometheusBinary)
  console.warn(
    "skipping the Prometheus scrape test: prometheus not found on PATH (install the Debian package `prometheus`)",
  );

const SESSION_SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"];
const REFUND_TASK = { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 100, reason: "DAMAGED" };
const KB = "loopguard.kb.v1.KbSearchService";
const BILLING = "loopguard.billing.v1.BillingService";

interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

let dataDir: string;
let prometheus: ChildProcess | undefined;
let prometheusUrl: string;
const processes: ServiceProcess[] = [];
let api: RawClient<typeof OrchestratorService>;
let orchestratorMetrics: string;

async function query(promql: string): Promise<Sample[]> {
  const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(promql)}`, {
    signal: AbortSignal.timeout(5000),
  });
  const body = (await response.json()) as { status: string; error?: string; data: { result: Sample[] } };
  if (body.status !== "success") throw new Error(`query ${promql} failed: ${body.error}`);
  return body.data.result;
}

/** Polls `probe` until it returns a value (not undefined); bounded, reports the last value seen. */
async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(250);
  }
}

async function startPrometheus(targets: { name: string; metricsPort: number }[]): Promise<void> {
  const port = await freePort();
  const configFile = join(dataDir, "prometheus.yml");
  writeFileSync(
    configFile,
    toYaml(
      localScrapeConfig(
        targets,
        committedRuleFiles(root).map((f) => join(root, f)),
        "1s",
      ),
    ),
  );
  const child = spawn(
    prometheusBinary!,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dataDir, "tsdb")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  prometheus = child;
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  prometheusUrl = `http://127.0.0.1:${port}`;
  await eventually(
    "Prometheus to be ready",
    async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited (${child.exitCode}): ${stderr}`);
      return (await fetch(`${prometheusUrl}/-/ready`, { signal: AbortSignal.timeout(1000) })).ok || undefined;
    },
    15_000,
  ).catch((error: Error) => {
    throw new Error(`${error.message}; stderr: ${stderr}`);
  });
}

async function stopPrometheus(): Promise<void> {
  const child = prometheus;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolveExit) => child.once("exit", resolveExit));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
  await exited;
  clearTimeout(timer);
}

async function runSession(goal: string, task: Record<string, unknown>): Promise<SessionState> {
  const { session } = await api.startSession({ goal, task: task as never, scopes: SESSION_SCOPES, policy: "scripted" });
  const end = Date.now() + 15_000;
  for (;;) {
    const state = (await api.getSession({ sessionId: session!.sessionId })).session!.state;
    if (state === SessionState.DONE || state === SessionState.FAILED || state === SessionState.CANCELLED) return state;
    if (Date.now() > end) throw new Error(`session ${session!.sessionId} still ${SessionState[state]}`);
    await sleep(50);
  }
}

describe.skipIf(!prometheusBinary)("Prometheus scraping the local suite", () => {
  const ended: SessionState[] = [];

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "loopguard-prometheus-"));
    const [kb, billing, risk] = await Promise.all([
      startTool("kb-search", dataDir),
      startTool("billing", dataDir),
      startTool("risk", dataDir),
    ]);
    processes.push(kb, billing, risk);
    const orchestrator = await spawnTool(join(root, "services", "orchestrator", "dist", "main.js"), {
      ...testOrchestratorEnv(),
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      LOOPGUARD_DATA_DIR: join(dataDir, "orchestrator"),
      KB_SEARCH_ADDR: kb.address,
      BILLING_ADDR: billing.address,
      RISK_ADDR: risk.address,
    });
    processes.push(orchestrator);
    orchestratorMetrics = `http://127.0.0.1:${orchestrator.metricsPort}/metrics`;
    await startPrometheus([
      { name: "kb-search", metricsPort: kb.metricsPort },
      { name: "billing", metricsPort: billing.metricsPort },
      { name: "risk", metricsPort: risk.metricsPort },
      { name: "orchestrator", metricsPort: orchestrator.metricsPort },
    ]);
    // Every target scraped once before any call, so the first calls show up as an increase.
    await eventually("every target to be up", async () => ((await query("up == 1")).length === 4 ? true : undefined));

    const token = await testToken({ subject: "prometheus-test", scopes: SESSION_OPERATOR_SCOPES });
    api = createRawClient(OrchestratorService, orchestrator.address, { token });
    // 20 sessions in 5 rounds about a scrape apart, so the traffic spans several samples.
    for (let round = 0; round < 5; round++) {
      const batch = [
        runSession("Refund 1.00 of ord_DEMO00000002", REFUND_TASK),
        runSession("Refund 1.00 of ord_DEMO00000002", REFUND_TASK),
        runSession("What is the refund policy?", {}),
        runSession("How is a customer's risk scored?", {}),
      ];
      ended.push(...(await Promise.all(batch)));
      await sleep(1100);
    }
  }, 60_000);

  afterAll(async () => {
    api?.close();
    await stopPrometheus();
    await Promise.all(processes.map((p) => kill(p)));
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }, 20_000);

  it("ran the sessions to an end", () => {
    expect(ended).toHaveLength(20);
    expect(ended.filter((s) => s === SessionState.DONE).length).toBeGreaterThan(0);
  });

  it("reads a per-tool request rate above zero for kb-search and billing", async () => {
    const rates = await eventually("a request rate for kb-search and billing", async () => {
      const result = await query("sum by (grpc_service) (rate(grpc_server_handled_total[1m]))");
      const byService = new Map(result.map((s) => [s.metric.grpc_service, Number(s.value[1])]));
      return (byService.get(KB) ?? 0) > 0 && (byService.get(BILLING) ?? 0) > 0 ? byService : undefined;
    });
    expect(rates.get(KB)).toBeGreaterThan(0);
    expect(rates.get(BILLING)).toBeGreaterThan(0);
  });

  it("reads a finite p95 latency above zero for kb-search and billing", async () => {
    const p95 = await eventually("a p95 for kb-search and billing", async () => {
      const result = await query(
        "histogram_quantile(0.95, sum by (le, grpc_service) (rate(grpc_server_handling_seconds_bucket[1m])))",
      );
      const byService = new Map(result.map((s) => [s.metric.grpc_service, Number(s.value[1])]));
      const usable = (v: number | undefined) => v !== undefined && Number.isFinite(v) && v > 0;
      return usable(byService.get(KB)) && usable(byService.get(BILLING)) ? byService : undefined;
    });
    expect(p95.get(KB)).toBeGreaterThan(0);
    expect(p95.get(KB)).toBeLessThan(10);
    expect(p95.get(BILLING)).toBeGreaterThan(0);
  });

  it("loads the generated rules, evaluates them without errors, and records the SLO series", async () => {
    interface RuleStatus {
      name: string;
      health: string;
      lastError?: string;
    }
    const groups = await eventually("every generated rule to evaluate", async () => {
      const response = await fetch(`${prometheusUrl}/api/v1/rules`, { signal: AbortSignal.timeout(5000) });
      const body = (await response.json()) as { data: { groups: { name: string; rules: RuleStatus[] }[] } };
      const all = body.data.groups.flatMap((g) => g.rules);
      return all.length > 0 && all.every((r) => r.health === "ok") ? body.data.groups : undefined;
    });
    expect(groups.map((g) => g.name).sort()).toEqual([
      "loopguard-agents",
      "loopguard-slo-billing",
      "loopguard-slo-kb-search",
      "loopguard-slo-orchestrator",
      "loopguard-slo-risk",
    ]);
    const names = groups.flatMap((g) => g.rules.map((r) => r.name));
    const records = [
      "loopguard:grpc_server_p95_seconds:5m",
      "loopguard:grpc_server_error_ratio:rate3m",
      "loopguard:grpc_server_error_ratio:rate1h",
    ];
    for (const name of [
      ...records,
      "KbSearchSearchLatencyAboveSlo",
      "BillingRefundErrorBudgetFastBurn",
      "RiskDown",
      "ToolBreakerOpen",
    ]) {
      expect(names).toContain(name);
    }
    const recorded = await eventually("the recorded p95 of kb-search Search", async () => {
      const result = await query('loopguard:grpc_server_p95_seconds:5m{tool="kb-search",grpc_method="Search"}');
      return result.length > 0 ? result : undefined;
    });
    expect(Number(recorded[0]!.value[1])).toBeGreaterThan(0);
  });

  it("scrapes from the orchestrator every metric the agents' alerts read, with the labels they select on", async () => {
    const read = new Set(
      agentRuleGroup(DEFAULT_TOOL_SERVICES).rules.flatMap((r) => String(r.expr).match(/\bloopguard_[a-z_]+/g) ?? []),
    );
    const exported = new Set(
      [...(await (await fetch(orchestratorMetrics)).text()).matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]),
    );
    // A histogram's series (_count, _sum, _bucket) are exported under its one # TYPE line.
    const missing = [...read].filter(
      (name) => !exported.has(name) && !exported.has(name.replace(/_(count|sum|bucket)$/, "")),
    );
    expect(missing.sort()).toEqual([]);
    const stops = await eventually("stop reasons of the ended sessions", async () => {
      const result = await query('sum by (stop_reason) (loopguard_session_stops_total{job="orchestrator"})');
      return result.length > 0 ? result : undefined;
    });
    expect(stops.map((s) => s.metric.stop_reason)).toContain("done");
    const calls = await query('sum by (tool, outcome) (loopguard_tool_client_calls_total{job="orchestrator"})');
    expect(calls.map((s) => `${s.metric.tool} ${s.metric.outcome}`)).toEqual(
      expect.arrayContaining(["kb-search ok", "billing ok"]),
    );
    expect((await query("loopguard_tool_breaker_state")).map((s) => s.metric.tool).sort()).toEqual([
      "billing",
      "kb-search",
      "risk",
    ]);
  });
});
