// Each drill scenario at a small size, as `pnpm drill … --json` runs it: real containers on
// loopback, real SIGKILL, real PostgreSQL where a service runs twice. What is asserted is the
// report's invariants a game day checks — nothing lost, nothing hung, no refund twice or lost,
// the dead tool not hammered — and that the report's files are written. The images are built
// first (quick once `pnpm images` or `.ci/run` has built them); like the containers tests, these
// need the orchestrator's ports 127.0.0.1:50051 and :8080 free. The release drill is not run here:
// its plan is checked in plan-run.test.ts, and the blue-green release and rollback under load it
// drives is release.int.test.ts's (with more checks). The refusal beside a running suite is
// checked in containers.int.test.ts, whose suite is up.
import { existsSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sourceRevision } from "../src/local/images.js";
import type { DrillReport } from "../src/ops/drills/report.js";
import { docker, root, suiteProcesses } from "./suite-processes.js";

const { dataDir, run } = suiteProcesses("loopguard-drills-");
const tag = sourceRevision(root).tag;

const drillCli = join(root, "deploy", "dist", "ops", "drills", "main.js");

/** Runs a drill with --json; its report, after checking what every run must show. */
async function drill(...args: string[]): Promise<DrillReport & { report_path: string }> {
  const result = await run(drillCli, [...args, "--tag", tag, "--json"], 240_000);
  if (result.code !== 0)
    throw new Error(`pnpm drill ${args.join(" ")} exited ${result.code}:\n${result.stderr.slice(-3000)}`);
  const lines = result.stdout.trim().split("\n");
  const report = JSON.parse(lines.at(-1)!) as DrillReport & { report_path: string };
  console.info(
    `[drill ${args.join(" ")}] ${JSON.stringify({ ...report, side_effects: undefined, faults: undefined, notes: undefined })}`,
  );
  expect(existsSync(report.report_path)).toBe(true);
  expect(readFileSync(report.report_path, "utf8")).toContain(`# Drill ${report.scenario}`);
  expect(JSON.parse(readFileSync(join(dirname(report.report_path), "report.json"), "utf8"))).toMatchObject({
    scenario: report.scenario,
    sessions_started: report.sessions_started,
  });
  expect(result.stderr).toContain("removing the drill's containers");
  return report;
}

/** One line of a drill's sessions.jsonl. */
interface SessionLine {
  readonly needs_approval: boolean;
  readonly refund_ids: readonly string[];
  readonly answer: string;
}

function sessionLines(report: { report_path: string }): SessionLine[] {
  return readFileSync(join(dirname(report.report_path), "sessions.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as SessionLine);
}

/**
 * What no fault may cost: every session ended, none twice (each one's step records read), every
 * refund made exactly once, and the high-risk refund made only after the second subject approved
 * it; when a fault kept its session from reading the order (before or after the approval), it made
 * none and names none.
 */
function expectNothingLost(report: DrillReport & { report_path: string }): void {
  expect(report.sessions_lost).toBe(0);
  expect(report.sessions_hung).toBe(0);
  expect(report.sessions_ended).toBe(report.sessions_started);
  expect(report.sessions_ended_twice).toBe(0);
  // Else "none twice" was not checked for every session.
  expect(report.sessions_unverified).toBe(0);
  expect(report.duplicate_side_effects).toBe(0);
  expect(report.lost_side_effects).toBe(0);
  expect(report.unowned_side_effects).toBe(0);
  for (const highRisk of sessionLines(report).filter((s) => s.needs_approval)) {
    if (highRisk.refund_ids.length > 0) expect(report.approvals_resolved).toBeGreaterThan(0);
    else expect(highRisk.answer).not.toContain("refund id");
  }
}

async function noContainersLeft(): Promise<void> {
  expect(await docker(["ps", "--all", "--quiet", "--filter", "label=io.loopguard.containers"])).toBe("");
}

beforeAll(async () => {
  const images = await run(join(root, "deploy", "dist", "local", "images-main.js"), ["--tag", tag], 1_500_000);
  if (images.code !== 0) throw new Error(`the drills need the images, and \`pnpm images\` failed:\n${images.stderr}`);
}, 1_800_000);

afterAll(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

describe("pnpm drill (small sizes)", () => {
  it("kill-tool kb-search --kill all: sessions park while it is dead and answer live or from the cache once it is back; the dead tool gets at most 1.2 attempts per call offered", async () => {
    const report = await drill("kill-tool", "--tool", "kb-search", "--sessions", "80", "--duration", "4");
    expectNothingLost(report);
    expect(report.success_rate).toBeGreaterThanOrEqual(0.995);
    expect(report.done_live + report.done_cached).toBe(report.outcomes.succeeded);
    expect(report.parks).toBeGreaterThan(0);
    expect(report.dead_windows).toHaveLength(1);
    expect(report.calls_offered_while_down).toBeGreaterThan(0);
    expect(report.calls_reaching_dead_tool!).toBeLessThanOrEqual(1.2 * report.calls_offered_while_down!);
    await noContainersLeft();
  }, 300_000);

  it("kill-tool billing --kill one during refunds: no refund twice, none lost, the second replica serves on", async () => {
    const report = await drill(
      "kill-tool",
      "--tool",
      "billing",
      "--kill",
      "one",
      "--sessions",
      "60",
      "--refund-share",
      "100",
      "--duration",
      "4",
    );
    expectNothingLost(report);
    expect(report.refund_sessions).toBe(60);
    expect(report.side_effects.refundsInLedger).toBe(report.side_effects.refundsReported);
    // Every refund but the high-risk one (approved by the drill's approver when billing lets it) is made.
    expect(report.side_effects.refundsInLedger).toBeGreaterThanOrEqual(59);
    expect(sessionLines(report).filter((s) => s.needs_approval)).toHaveLength(1);
    expect(report.calls_reaching_dead_tool).toBeNull();
  }, 300_000);

  it("kill-orchestrator: one of two replicas on PostgreSQL SIGKILLed mid-load; every session ends once, on the other", async () => {
    const report = await drill("kill-orchestrator", "--sessions", "60");
    expectNothingLost(report);
    expect(report.containers.orchestrator).toBe(2);
    expect(report.faults.some((f) => f.what.includes("SIGKILL orchestrator-"))).toBe(true);
  }, 300_000);

  it("latency: kb-search Search answers 2 × its p95 target late; sessions still end, slower", async () => {
    const report = await drill("latency", "--tool", "kb-search", "--sessions", "40", "--duration", "3");
    expectNothingLost(report);
    expect(report.faults[0]?.what).toContain("+600 ms on every call (2 × its contract p95 target of 300 ms)");
    expect(report.success_rate).toBe(1);
    // Billing is healthy here, so the high-risk refund waits for its approval and is made.
    expect(sessionLines(report).filter((s) => s.needs_approval && s.refund_ids.length === 1)).toHaveLength(1);
    expect(report.approvals_resolved).toBeGreaterThan(0);
  }, 300_000);

  it("errors: 30 % of billing calls fail; retries and keys keep every refund once", async () => {
    const report = await drill(
      "errors",
      "--tool",
      "billing",
      "--error-rate",
      "30",
      "--sessions",
      "40",
      "--refund-share",
      "100",
      "--duration",
      "3",
    );
    expectNothingLost(report);
    expect(report.faults[0]?.what).toContain("30 % of calls fail UNAVAILABLE (injected)");
  }, 300_000);

  it("flap kb-search: killed and restarted over and over; every dead window counted", async () => {
    const report = await drill("flap", "--tool", "kb-search", "--sessions", "120", "--duration", "6");
    expectNothingLost(report);
    expect(report.dead_windows.length).toBeGreaterThanOrEqual(1);
    expect(report.calls_reaching_dead_tool!).toBeLessThanOrEqual(1.2 * Math.max(1, report.calls_offered_while_down!));
    await noContainersLeft();
  }, 300_000);
});
