// How a patrol run is judged and shown: a task passes when its session's outcome, stop reason and
// approval are what the golden set expects (or the start was refused with the expected code on the
// expected field); the figures are the success ratio, the stop reasons, p95 latency and the cost.
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { PatrolRun } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type Approval, expectedText, type GoldenTask } from "./patrol-tasks.js";

export type TaskResult =
  | {
      readonly task: GoldenTask;
      readonly sessionId: string;
      readonly latencyMs: number;
      readonly outcome: string;
      readonly outcomeReason: string;
      readonly stopReason: string;
      readonly approval: Approval;
      readonly costMicros: bigint;
    }
  | {
      readonly task: GoldenTask;
      readonly sessionId: string;
      readonly latencyMs: number;
      readonly refused: { readonly code: string; readonly fields: readonly string[]; readonly message: string };
    }
  | {
      readonly task: GoldenTask;
      readonly sessionId: string;
      readonly latencyMs: number;
      /** The orchestrator stopped answering (UNAVAILABLE, DEADLINE_EXCEEDED) before the task's session ended: it failed. */
      readonly cutOff: { readonly code: string; readonly message: string };
    };

type Finished = Extract<TaskResult, { outcome: string }>;

const finished = (r: TaskResult): r is Finished => "outcome" in r;

export interface Mismatch {
  readonly task: GoldenTask;
  readonly expected: string;
  readonly got: string;
  readonly sessionId: string;
}

export interface Verdict {
  readonly tasks: number;
  readonly passed: number;
  readonly threshold: number;
  /** Sessions by stop reason; starts refused under "refused:<CODE>", tasks cut off under "cut_off:<CODE>". */
  readonly stopReasons: Record<string, number>;
  readonly p95LatencyMs: number;
  readonly costMicros: bigint;
  readonly mismatches: readonly Mismatch[];
}

function gotText(r: TaskResult): string {
  if ("cutOff" in r) return `cut off: ${r.cutOff.code} ${r.cutOff.message}`;
  if ("refused" in r)
    return `${r.refused.code} on ${r.refused.fields.join(", ") || "(no field)"}: ${r.refused.message}`;
  return `${r.outcome || "(no outcome)"} ${r.stopReason || "(no stop reason)"}${r.approval === "none" ? "" : ` (${r.approval})`}${r.outcomeReason ? ` [${r.outcomeReason}]` : ""}`;
}

function passes(r: TaskResult): boolean {
  const e = r.task.expect;
  if ("error" in e)
    return (
      "refused" in r &&
      r.refused.code === e.error.code &&
      r.refused.fields.some(
        (f) => f === e.error.field || f.startsWith(`${e.error.field}.`) || f.startsWith(`${e.error.field}[`),
      )
    );
  return finished(r) && r.outcome === e.outcome && r.stopReason === e.stopReason && r.approval === e.approval;
}

/** Nearest-rank p95 of the latencies. */
function p95(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil(0.95 * sorted.length) - 1]!;
}

export function judge(results: readonly TaskResult[], threshold: number): Verdict {
  const stopReasons: Record<string, number> = {};
  let costMicros = 0n;
  const mismatches: Mismatch[] = [];
  for (const r of results) {
    const key = finished(r)
      ? r.stopReason || "(none)"
      : "refused" in r
        ? `refused:${r.refused.code}`
        : `cut_off:${r.cutOff.code}`;
    stopReasons[key] = (stopReasons[key] ?? 0) + 1;
    if (finished(r)) costMicros += r.costMicros;
    if (!passes(r))
      mismatches.push({ task: r.task, expected: expectedText(r.task), got: gotText(r), sessionId: r.sessionId });
  }
  return {
    tasks: results.length,
    passed: results.length - mismatches.length,
    threshold,
    stopReasons,
    p95LatencyMs: p95(results.filter(finished).map((r) => r.latencyMs)),
    costMicros,
    mismatches,
  };
}

const percent = (ratio: number) => `${(ratio * 100).toFixed(1)}%`;

export interface ReportOptions {
  readonly json: boolean;
  readonly runId: string;
  /** The run recorded before, when it ran the same golden set. */
  readonly previous: PatrolRun | undefined;
  readonly previousOtherSet: boolean;
}

export function printReport(v: Verdict, o: ReportOptions): void {
  const ratio = v.passed / v.tasks;
  const failing = v.mismatches.map((m) => m.task.id);
  const before = new Set(o.previous?.mismatches.map((m) => m.taskId) ?? []);
  const compare = o.previous
    ? {
        previous_run_id: o.previous.runId,
        previous_success_ratio: o.previous.successRatio,
        change_points: Number(((ratio - o.previous.successRatio) * 100).toFixed(1)),
        newly_failing: failing.filter((id) => !before.has(id)),
        fixed: [...before].filter((id) => !failing.includes(id)),
      }
    : undefined;
  if (o.json) {
    const mismatches = v.mismatches.map((m) => ({
      task: m.task.id,
      expected: m.expected,
      got: m.got,
      session_id: m.sessionId,
    }));
    console.log(
      JSON.stringify({
        run_id: o.runId,
        tasks: v.tasks,
        passed: v.passed,
        success_ratio: ratio,
        threshold: v.threshold,
        stop_reasons: v.stopReasons,
        p95_latency_ms: v.p95LatencyMs,
        cost_micros: String(v.costMicros),
        mismatches,
        compare: compare ?? null,
      }),
    );
    return;
  }
  const histogram = Object.entries(v.stopReasons)
    .sort((a, b) => b[1] - a[1])
    .map(([reason, n]) => `${reason} ${n}`)
    .join(", ");
  const lines = [
    `success   ${v.passed}/${v.tasks} = ${percent(ratio)} by outcome (threshold ${percent(v.threshold)}): ${ratio >= v.threshold ? "PASS" : "FAIL"}`,
    `stops     ${histogram}`,
    `latency   p95 ${v.p95LatencyMs} ms`,
    `cost      ${v.costMicros} micros`,
    `recorded  ${o.runId}`,
  ];
  if (v.mismatches.length > 0) {
    lines.push(`mismatches (${v.mismatches.length}):`, `  ${"task".padEnd(36)} ${"expected".padEnd(34)} got`);
    for (const m of v.mismatches)
      lines.push(
        `  ${m.task.id.padEnd(36)} ${m.expected.padEnd(34)} ${m.got}${m.sessionId ? `  (${m.sessionId})` : ""}`,
      );
  }
  if (compare && o.previous) {
    const at = new Date(timestampMs(o.previous.finishedAt!)).toISOString();
    const sign = compare.change_points >= 0 ? "+" : "";
    lines.push(
      `compare   last run ${compare.previous_run_id} (${at}): ${percent(compare.previous_success_ratio)} → ${percent(ratio)} (${sign}${compare.change_points} points); newly failing: ${compare.newly_failing.join(", ") || "none"}; fixed: ${compare.fixed.join(", ") || "none"}`,
    );
  } else {
    lines.push(
      o.previousOtherSet
        ? "compare   the last run ran another golden set: not compared"
        : "compare   no earlier run recorded",
    );
  }
  console.log(lines.join("\n"));
}
