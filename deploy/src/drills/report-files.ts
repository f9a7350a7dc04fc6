// A drill's report written down, in a folder of its own per run: report.md for people,
// report.json for machines (docs/game-day.md), and sessions.jsonl with every session's own line.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { computeReport, type DrillReport, type ReportInput } from "./report.js";
import { renderMarkdown } from "./report-markdown.js";

/** What a run collected: the report's input but for what the run itself cost. */
export type Collected = Omit<ReportInput, "runtimeMs" | "runnerCpuMs">;

export interface DrillResult {
  readonly runId: string;
  readonly startedAt: Date;
  readonly report: DrillReport;
  readonly markdownPath: string;
  readonly jsonPath: string;
}

/** Writes a report, Markdown and JSON, in the run's own folder under `reportsDir`. */
export function writeReportFiles(
  reportsDir: string,
  runId: string,
  report: DrillReport,
  startedAt: Date,
): { dir: string; markdownPath: string; jsonPath: string } {
  const dir = join(reportsDir, runId);
  mkdirSync(dir, { recursive: true });
  const markdownPath = join(dir, "report.md");
  const jsonPath = join(dir, "report.json");
  writeFileSync(markdownPath, renderMarkdown(report, startedAt));
  writeFileSync(jsonPath, `${JSON.stringify(report, null, 2)}\n`);
  return { dir, markdownPath, jsonPath };
}

/** Computes the report of what a run collected (`clock` and `cpu` taken at its start) and writes it. */
export function writeReport(
  reportsDir: string,
  runId: string,
  startedAt: Date,
  collected: Collected,
  clock: number,
  cpu: NodeJS.CpuUsage,
): DrillResult {
  const used = process.cpuUsage(cpu);
  const report = computeReport({
    ...collected,
    runtimeMs: performance.now() - clock,
    runnerCpuMs: (used.user + used.system) / 1000,
  });
  const { dir, markdownPath, jsonPath } = writeReportFiles(reportsDir, runId, report, startedAt);
  // Every session's own line, for whoever wants to look at one of them.
  const sessions = collected.outcomes.map((o, index) =>
    JSON.stringify({
      index,
      kind: o.kind,
      needs_approval: o.needsApproval,
      session_id: o.sessionId ?? null,
      state: o.state ?? "MISSING",
      stop_reason: o.stopReason,
      outcome: o.outcome,
      outcome_reason: o.outcomeReason,
      duration_ms: o.durationMs ?? null,
      served_from: o.trace?.servedFrom ?? [],
      refund_ids: o.trace?.refundIds ?? [],
      answer: o.answer,
    }),
  );
  writeFileSync(join(dir, "sessions.jsonl"), `${sessions.join("\n")}\n`);
  return { runId, startedAt, report, markdownPath, jsonPath };
}
