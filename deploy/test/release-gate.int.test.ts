// The release gate against real processes: a good billing and a bad one — started with
// LOOPGUARD_FAULT_PROFILE failing 30 % of GetOrder, as a release rehearsal's bad image does —, the
// real loopguard-smoke CLI signed with the local suite's probe key, and a real Prometheus scraping
// both pods with the label the plain release path puts on a colour's series (version=good|bad). The
// gate queries Argo Rollouts and the kubectl path ask are asked of that Prometheus, and the local
// path's own measure of the same pods must agree. With LOOPGUARD_RECORD_GATE_FIXTURES=1 the answers
// are written to test/fixtures/prometheus, where the kubectl path's tests read them.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { freePort, kill, type ServiceProcess } from "@loopguard/test-kit";
import { startTool } from "@loopguard/tool-sdk/testing";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { ensureLocalKeys } from "@loopguard/tool-sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type GateAnswer, gateVerdict, judgedMethods, prometheusAnswer } from "../src/ops/release/gate.js";
import { type GateKind, gateQueries } from "../src/manifests/gate-queries.js";
import { measureLocally, type Reading, readPages } from "../src/ops/release/local-measure.js";
import { methodSlos } from "../src/manifests/slo-rules.js";
import { toYaml } from "../src/manifests/yaml.js";
import { findExecutable } from "./promtool.js";
import { type Run, runProcess } from "./run-process.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const FIXTURES = join(root, "deploy", "test", "fixtures", "prometheus");
const SMOKE_CLI = join(root, "services", "tool-sdk", "dist", "cli", "smoke.js");
const prometheusBinary = findExecutable("prometheus");
if (!prometheusBinary)
  console.warn(
    "skipping the release gate test: prometheus not found on PATH (install the Debian package `prometheus`)",
  );

const slos = methodSlos([BillingService]);
const FAULTS = JSON.stringify({ errorRate: 0.3, methods: ["GetOrder"] });

let dataDir: string;
let prometheus: ChildProcess | undefined;
let prometheusUrl: string;
const pods: Record<"good" | "bad", ServiceProcess> = {} as never;

function run(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  return runProcess(process.execPath, args, {
    env: { ...process.env, LOOPGUARD_DATA_DIR: dataDir, ...env },
    timeoutMs: 60_000,
  });
}

const pageOf = (version: "good" | "bad"): Promise<Reading> =>
  readPages(new Map([[version, `http://127.0.0.1:${pods[version].metricsPort}/metrics`]]));

async function ask(kind: GateKind, version: string): Promise<{ body: unknown; answer: GateAnswer }> {
  const query = gateQueries(slos, { version }).find((q) => q.kind === kind)!.query;
  const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(query)}`, {
    signal: AbortSignal.timeout(5000),
  });
  const body = (await response.json()) as unknown;
  return { body, answer: prometheusAnswer(kind, body) };
}

async function startPrometheus(): Promise<void> {
  const port = await freePort();
  const config = {
    global: { scrape_interval: "1s", evaluation_interval: "1s" },
    scrape_configs: (["good", "bad"] as const).map((version) => ({
      job_name: `billing-${version}`,
      static_configs: [{ targets: [`127.0.0.1:${pods[version].metricsPort}`], labels: { version } }],
    })),
  };
  writeFileSync(join(dataDir, "prometheus.yml"), toYaml(config));
  prometheus = spawn(
    prometheusBinary!,
    [
      `--config.file=${join(dataDir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(dataDir, "tsdb")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    {
      stdio: "ignore",
    },
  );
  prometheusUrl = `http://127.0.0.1:${port}`;
  for (const end = Date.now() + 20_000; ; await sleep(250)) {
    const up = await fetch(`${prometheusUrl}/api/v1/query?query=up`, { signal: AbortSignal.timeout(1000) })
      .then((r) => r.json() as Promise<{ data: { result: { value: [number, string] }[] } }>)
      .catch(() => undefined);
    if (up?.data.result.length === 2 && up.data.result.every((s) => s.value[1] === "1")) return;
    if (Date.now() > end) throw new Error("Prometheus did not scrape both billing pods within 20 s");
  }
}

describe.skipIf(!prometheusBinary)("the release gate on real processes", () => {
  const smoke: Record<string, { code: number; stdout: string; before: Reading; after: Reading }> = {};

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "loopguard-gate-"));
    const keys = ensureLocalKeys(dataDir);
    // No demo data, as in production: the smoke call asks for an order no deployment holds.
    const env = { LOOPGUARD_JWKS_FILE: keys.jwks, BILLING_SEED_DEMO: "false" };
    [pods.good, pods.bad] = await Promise.all([
      startTool("billing", join(dataDir, "good"), 0, env),
      startTool("billing", join(dataDir, "bad"), 0, { ...env, LOOPGUARD_FAULT_PROFILE: FAULTS }),
    ]);
    await startPrometheus();
    // One pod after the other, the calls spread over 5 s so that several scrapes see them arrive.
    for (const version of ["good", "bad"] as const) {
      const before = await pageOf(version);
      const result = await run([SMOKE_CLI, "--tool", "billing", "--target", pods[version].address, "--over", "5"]);
      smoke[version] = { ...result, before, after: await pageOf(version) };
    }
  }, 90_000);

  afterAll(async () => {
    prometheus?.kill("SIGTERM");
    await Promise.all(Object.values(pods).map((p) => kill(p)));
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }, 20_000);

  it("starts a tool with the fault profile in force, and refuses a malformed one or one naming no method of the tool with one line, exit 2", async () => {
    expect(
      pods.bad.lines.find((l) => l.msg === "faults injected from the start (LOOPGUARD_FAULT_PROFILE)"),
    ).toMatchObject({ faults: { error_rate: 0.3, methods: ["GetOrder"] } });
    const entry = join(root, "services", "billing", "dist", "main.js");
    const env = {
      BILLING_PORT: "0",
      BILLING_METRICS_PORT: "0",
      LOOPGUARD_JWKS_FILE: join(dataDir, "keys", "jwks.json"),
      LOOPGUARD_DATA_DIR: join(dataDir, "refused"),
    };
    for (const [profile, message] of [
      ['{"errorRate": 0.3,', /^billing: configuration error: LOOPGUARD_FAULT_PROFILE: not a fault profile: .+\n$/],
      [
        '{"errorRate": 0.3, "methods": ["GetOrdr"]}',
        /^billing: configuration error: LOOPGUARD_FAULT_PROFILE: methods names "GetOrdr", not a method of loopguard\.billing\.v1\.BillingService \(GetOrder, Refund, ListRefunds\)\n$/,
      ],
    ] as const) {
      const result = await run([entry], { ...env, LOOPGUARD_FAULT_PROFILE: profile });
      expect([result.code, result.stderr], profile).toEqual([2, expect.stringMatching(message)]);
    }
  }, 60_000);

  it("smoke calls signed by the probe key: the good pod answers every one, the bad one about 30 % UNAVAILABLE", () => {
    expect(smoke.good!.code, smoke.good!.stdout).toBe(0);
    expect(smoke.good!.stdout).toMatch(
      /^smoke billing GetOrder: [0-6] of 400 calls failed.*, 6 allowed at a 0\.5 % error rate; p95 [\d.]+ ms → 127\.0\.0\.1:\d+\n$/,
    );
    expect(smoke.bad!.code).toBe(1);
    const failed = Number(/: (\d+) of 400 calls failed \(UNAVAILABLE × \d+\)/.exec(smoke.bad!.stdout)?.[1]);
    // 400 calls at 30 %: 120 expected, 9 the standard deviation.
    expect(failed, smoke.bad!.stdout).toBeGreaterThan(80);
    expect(failed, smoke.bad!.stdout).toBeLessThan(160);
  });

  it("the local gate measures the good pod within its SLO and the bad one far above its error budget", () => {
    const verdict = (version: "good" | "bad") =>
      gateVerdict(judgedMethods(slos), measureLocally(slos, smoke[version]!.before, smoke[version]!.after));
    const good = verdict("good");
    expect(good.passed, good.findings.join("\n")).toBe(true);
    expect(good.findings).toEqual([
      expect.stringMatching(/^billing GetOrder error ratio 0 % \(budget 0\.5 %\)$/),
      expect.stringMatching(/^billing GetOrder p95 \d+ ms \(target 150 ms\)$/),
    ]);
    const bad = verdict("bad");
    expect(bad.passed).toBe(false);
    expect(bad.findings[0]).toMatch(
      /^billing GetOrder error ratio [23]\d(\.\d)? % \(budget 0\.5 %\): above its budget$/,
    );
  });

  it("Prometheus answers the gate queries as the local gate measured: good passes, bad fails, a set never scraped answers nothing", async () => {
    const answers: Record<string, Awaited<ReturnType<typeof ask>>> = {};
    // A scrape or two after the last smoke call, every call is in.
    for (const end = Date.now() + 20_000; ; await sleep(500)) {
      for (const [version, kind] of [
        ["good", "error-ratio"],
        ["good", "p95"],
        ["bad", "error-ratio"],
        ["bad", "p95"],
        ["absent", "error-ratio"],
        ["absent", "p95"],
      ] as const) {
        answers[`${version}-${kind}`] = await ask(kind, version);
      }
      if (Object.entries(answers).every(([name, a]) => name.startsWith("absent") || a.answer.values.length > 0)) break;
      if (Date.now() > end)
        throw new Error(`Prometheus did not judge both pods within 20 s: ${JSON.stringify(answers)}`);
    }
    const judged = (version: string) =>
      gateVerdict(judgedMethods(slos), [answers[`${version}-error-ratio`]!.answer, answers[`${version}-p95`]!.answer]);
    expect(judged("good").passed, judged("good").findings.join("\n")).toBe(true);
    expect(judged("bad").findings[0]).toMatch(
      /^billing GetOrder error ratio [23]\d(\.\d)? % \(budget 0\.5 %\): above its budget$/,
    );
    expect(judged("absent").findings[0]).toMatch(/^no method of billing had the calls to judge its error ratio on/);
    // The same pods, the same ratio: Prometheus's rate over the window against the local count of calls.
    const local = measureLocally(slos, smoke.bad!.before, smoke.bad!.after)[0]!.values[0]!.value;
    expect(answers["bad-error-ratio"]!.answer.values[0]!.value).toBeCloseTo(local, -1);
    if (process.env.LOOPGUARD_RECORD_GATE_FIXTURES) {
      mkdirSync(FIXTURES, { recursive: true });
      for (const [name, { body }] of Object.entries(answers))
        writeFileSync(join(FIXTURES, `${name.replace("absent", "empty")}.json`), `${JSON.stringify(body, null, 2)}\n`);
    }
  }, 30_000);
});
