// `pnpm patrol` end to end: the suite's processes on loopback with the local people's keys, the
// golden set run by the real CLI (requester starts, approver answers, operator records), its
// printed figures, its exit codes, the orchestrator's patrol gauges, and a ledger the dry run left
// as it was.
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { kill, repoRoot, type ServiceProcess, tempDir } from "@loopguard/test-kit";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, ensureLocalKeys, mintToken, personKey, status } from "@loopguard/tool-sdk";
import { spawnTool, startAllTools, toolAddressEnv, workspaceService } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const PATROL = join(repoRoot, "services", "orchestrator", "dist", "cli", "patrol.js");
const GOLDEN = join(repoRoot, "test", "golden", "tasks.jsonl");
const data = tempDir("e2e");
let tools: Record<string, ServiceProcess>;
let orchestrator: ServiceProcess;

function patrol(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [PATROL, "--orchestrator", orchestrator.address, ...args], {
    env: { ...process.env, LOOPGUARD_DATA_DIR: data.dir },
    cwd: repoRoot,
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((done) => child.once("exit", (code) => done({ code, stdout, stderr })));
}

/** Every demo order's refunded total and refunds, as billing answers them to the operator. */
async function ledger(): Promise<string> {
  const operator = personKey({ LOOPGUARD_DATA_DIR: data.dir }, "operator");
  const token = await mintToken(operator.key, {
    subject: "operator",
    audience: "billing",
    scopes: ["billing:read"],
    ttlSeconds: 300,
  });
  const billing = createRawClient(BillingService, tools.billing!.address, { token });
  try {
    const ids = Array.from({ length: 10 }, (_, i) => `ord_DEMO${String(i + 1).padStart(8, "0")}`);
    const rows = await Promise.all(
      ids.map(async (orderId) => [
        (await billing.getOrder({ orderId })).order?.amountRefundedCents,
        (await billing.listRefunds({ orderId })).refunds.length,
      ]),
    );
    return JSON.stringify(rows, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v));
  } finally {
    billing.close();
  }
}

beforeAll(async () => {
  const keys = ensureLocalKeys(data.dir);
  const jwks = readFileSync(keys.jwks, "utf8");
  // A first start on a busy machine (a fresh ledger, migrations, the demo seed) can take longer than spawnTool's default.
  tools = await startAllTools(data.dir, { env: { LOOPGUARD_JWKS: jwks }, timeoutMs: 45_000 });
  orchestrator = await spawnTool(
    workspaceService("orchestrator").entry,
    {
      LOOPGUARD_JWKS: jwks,
      LOOPGUARD_SIGNING_KEY_FILE: keys.orchestrator,
      LOOPGUARD_DATA_DIR: data.dir,
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      ...toolAddressEnv(tools),
    },
    45_000,
  );
}, 100_000);

afterAll(async () => {
  await Promise.all([orchestrator, ...Object.values(tools ?? {})].filter(Boolean).map((p) => kill(p)));
  data.remove();
});

describe("pnpm patrol", () => {
  it("runs the golden set dry: success rate by outcome, stop reasons, p95 and cost printed, the run on /metrics, no money moved", async () => {
    // Before any run the gauges have no sample: a 0 would read as "last run in 1970" and fire PatrolRunMissing.
    const unrun = await (await fetch(`http://127.0.0.1:${orchestrator.metricsPort}/metrics`)).text();
    expect(unrun).toMatch(/^# TYPE loopguard_patrol_last_run_timestamp_seconds gauge$/m);
    expect(unrun).not.toMatch(/^loopguard_patrol_(last_run_timestamp_seconds|success_ratio)[{ ]/m);
    const before = await ledger();
    const run = await patrol("--concurrency", "4");
    expect(run.code).toBe(0);
    const success = /success\s+(\d+)\/(\d+) = ([\d.]+)% by outcome \(threshold 95\.0%\): PASS/.exec(run.stdout);
    expect(success).not.toBeNull();
    const [passed, total] = [Number(success![1]), Number(success![2])];
    expect(total).toBe(readFileSync(GOLDEN, "utf8").trim().split("\n").length);
    // On a fresh suite every expectation of the golden set holds: a mismatch is a regression (or a wrong line),
    // named in the printed report.
    expect(passed, run.stdout).toBe(total);
    // The histogram: each stop reason as many times as the golden set expects it (every task matched).
    const golden = readFileSync(GOLDEN, "utf8")
      .trim()
      .split("\n")
      .map((l) => (JSON.parse(l) as { expect: { stop_reason?: string; error?: { code: string } } }).expect);
    const counts = new Map<string, number>();
    for (const e of golden) {
      const reason = e.error ? `refused:${e.error.code}` : e.stop_reason!;
      counts.set(reason, (counts.get(reason) ?? 0) + 1);
    }
    for (const [reason, n] of counts) expect(run.stdout).toMatch(new RegExp(`^stops .*\\b${reason} ${n}\\b`, "m"));
    expect(run.stdout).toMatch(/^stops\s+done \d+, refused:INVALID_ARGUMENT \d+, approval_denied \d+$/m);
    expect(run.stdout).toMatch(/latency\s+p95 \d+ ms/);
    expect(run.stdout).toMatch(/compare\s+no earlier run recorded/);
    expect(await ledger()).toBe(before);

    const metrics = await (await fetch(`http://127.0.0.1:${orchestrator.metricsPort}/metrics`)).text();
    expect(Number(/^loopguard_patrol_success_ratio(?:\{[^}]*\})? ([\d.e-]+)$/m.exec(metrics)?.[1])).toBeCloseTo(
      passed / total,
      6,
    );
    expect(metrics).toMatch(new RegExp(`^loopguard_patrol_tasks(?:\\{[^}]*\\})? ${total}$`, "m"));
    expect(metrics).toMatch(/^loopguard_patrol_dry_run(?:\{[^}]*\})? 1$/m);
    const last = Number(/^loopguard_patrol_last_run_timestamp_seconds(?:\{[^}]*\})? ([\d.e+]+)$/m.exec(metrics)?.[1]);
    expect(Math.abs(last - Date.now() / 1000)).toBeLessThan(120);
  }, 90_000);

  it("exits 1 under the threshold with the mismatch named, compares with the last run, and 2 on bad usage", async () => {
    const lines = readFileSync(GOLDEN, "utf8").trim().split("\n");
    const wrong = JSON.parse(lines.find((l) => l.includes('"refund-already-refunded-1"'))!) as {
      expect: Record<string, string>;
    };
    wrong.expect = { outcome: "succeeded", stop_reason: "done", approval: "none" };
    const file = join(data.dir, "two-tasks.jsonl");
    writeFileSync(file, `${lines.find((l) => l.includes('"question-01"'))}\n${JSON.stringify(wrong)}\n`);
    const run = await patrol("--tasks", file, "--threshold", "0.9");
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/success\s+1\/2 = 50\.0% by outcome \(threshold 90\.0%\): FAIL/);
    expect(run.stdout).toMatch(
      /refund-already-refunded-1\s+succeeded done\s+not_done done \[no_effect: billing_refund\]/,
    );
    expect(run.stdout).toMatch(/compare\s+the last run ran another golden set: not compared/);
    const again = await patrol("--tasks", file, "--threshold", "0.9");
    expect(again.stdout).toMatch(
      /compare\s+last run pr_\S+ \(.*\): 50\.0% → 50\.0% \(\+0 points\); newly failing: none; fixed: none/,
    );

    // Recording is the operator's (patrol:report); figures that disagree are refused with the field named.
    const operator = personKey({ LOOPGUARD_DATA_DIR: data.dir }, "operator");
    const recorder = createRawClient(OrchestratorService, orchestrator.address, {
      token: await mintToken(operator.key, {
        subject: "operator",
        audience: "orchestrator",
        scopes: ["patrol:report"],
        ttlSeconds: 300,
      }),
    });
    const at = { seconds: BigInt(Math.floor(Date.now() / 1000)), nanos: 0 };
    const refused = await recorder
      .recordPatrolRun({
        run: { startedAt: at, finishedAt: at, tasks: 10, passed: 11, successRatio: 1, threshold: 0.95 },
      })
      .catch((e: unknown) => e);
    recorder.close();
    expect(refused).toBeInstanceOf(CallError);
    expect([status[(refused as CallError).code], (refused as CallError).fieldViolations.map((v) => v.field)]).toEqual([
      "INVALID_ARGUMENT",
      ["run.passed"],
    ]);

    const bad = await patrol("--threshold", "2");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--threshold must be a number in 0..1");
  }, 60_000);
});
