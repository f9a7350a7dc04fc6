// The drill report, built: what the agents experienced (sessions ended, lost, hung; how; how long),
// what happened to money (the side-effect audit, money.ts), and what the tools saw (calls offered,
// calls that reached a dead tool, fallbacks, breakers). Pure functions of what the runner
// collected, so every figure is unit-tested; its JSON field names are docs/game-day.md's contract.
// Rendered for people in report-markdown.ts, written to files in report-files.ts.
import type { DrillOptions } from "./options.js";
import type { SessionKind } from "./session-plan.js";
import type { TraceFacts } from "./trace-facts.js";

const TERMINAL = new Set(["DONE", "FAILED", "CANCELLED"]);

/** One session as the drill saw it at the end. */
export interface SessionOutcome {
  readonly kind: SessionKind;
  readonly needsApproval: boolean;
  /** undefined: the orchestrator never acknowledged its start, or has no such session at the end. */
  readonly sessionId: string | undefined;
  /** State at the end (e.g. "DONE"), or undefined when the session is missing. */
  readonly state: string | undefined;
  readonly stopReason: string;
  /** What the user got, as the orchestrator says (succeeded, partial, not_done), and why when not succeeded; "" while it runs. */
  readonly outcome: string;
  readonly outcomeReason: string;
  readonly answer: string;
  /** Creation to the last update (its end, for an ended session), by the orchestrator's clock. */
  readonly durationMs: number | undefined;
  readonly trace: TraceFacts | undefined;
}

export interface SideEffectAudit {
  readonly method: string;
  /** Refunds the ledger holds that this run made. */
  readonly refundsInLedger: number;
  /** Sessions that observed a refund succeed. */
  readonly refundsReported: number;
  /** Refund ids claimed by more than one session, and sessions holding more than one refund (the extra ones). */
  readonly duplicate: number;
  /** Sessions whose refund (observed or cited in the answer) the ledger does not have. */
  readonly lost: number;
  /** Refunds of this run in the ledger that no session owns: made twice, or made without the session learning of it. */
  readonly unowned: number;
  /** DONE sessions that reported a refund, each found exactly once in the ledger. */
  readonly doneRefundsExactlyOnce: number;
  readonly examples: readonly string[];
}

/** Nearest-rank percentile of `values` (sorted ascending); undefined for none. */
export function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

export interface FaultEvent {
  /** Milliseconds since the sessions were started. */
  readonly atMs: number;
  readonly what: string;
}

export interface DeadWindow {
  readonly fromMs: number;
  readonly toMs: number;
  /** Calls the policies offered the tool while it was down. */
  readonly offered: number;
  /** Client RPC attempts sent to it while it was down, retries included. */
  readonly attempts: number;
}

export interface ToolFigures {
  readonly offered: number;
  readonly attempts: number;
  readonly fallbacks: number;
  readonly failed: number;
  readonly failures: Readonly<Record<string, number>>;
  readonly breakerTransitions: Readonly<Record<string, number>>;
}

export interface ReportInput {
  readonly options: DrillOptions;
  readonly outcomes: readonly SessionOutcome[];
  readonly audit: SideEffectAudit;
  /** Per tool, over the whole load. */
  readonly tools: Readonly<Record<string, ToolFigures>>;
  readonly deadWindows: readonly DeadWindow[];
  readonly faults: readonly FaultEvent[];
  readonly approvalsResolved: number;
  /** Times sessions parked to wait for a tool (the orchestrators' transitions into PARKED). */
  readonly parks: number;
  readonly boundMs: number;
  readonly runtimeMs: number;
  readonly runnerCpuMs: number;
  readonly containers: Readonly<Record<string, number>>;
  readonly notes: readonly string[];
}

export interface DrillReport {
  readonly scenario: string;
  readonly tool: string;
  readonly kill: string | null;
  readonly sessions_started: number;
  readonly sessions_ended: number;
  readonly sessions_lost: number;
  readonly sessions_hung: number;
  readonly sessions_ended_twice: number;
  /**
   * Ended sessions whose step records (GetTrace) could not be read: whether they ended twice, saw a
   * refund twice or used a cache or degraded answer is unknown, and none of them counts as live.
   */
  readonly sessions_unverified: number;
  /** Sessions whose outcome is succeeded ÷ sessions started: a degraded answer or a session that did not do its task is not a success. */
  readonly success_rate: number;
  /** Sessions ending done, by where their tool answers came from. */
  readonly done: { readonly live: number; readonly cache: number; readonly degraded: number };
  /** Sessions by outcome: succeeded, partial, not_done (and unknown: ended without one). */
  readonly outcomes: Readonly<Record<string, number>>;
  /** Succeeded sessions whose answers were all live. */
  readonly done_live: number;
  /** Succeeded sessions that used a cached answer, and the ages of the cached answers they used. */
  readonly done_cached: number;
  readonly done_cached_age_ms: { readonly p50: number | null; readonly max: number | null };
  /** Ended sessions whose answer stands on a degraded answer (outcome partial). */
  readonly done_degraded: number;
  /** Sessions that did not do their task, by reason (lost and hung sessions included). */
  readonly not_done: Readonly<Record<string, number>>;
  readonly stop_reasons: Readonly<Record<string, number>>;
  readonly refund_sessions: number;
  readonly approvals_resolved: number;
  /** Times sessions parked to wait for a tool that was down (one session may park several times). */
  readonly parks: number;
  readonly duplicate_side_effects: number;
  readonly lost_side_effects: number;
  readonly unowned_side_effects: number;
  readonly side_effects: SideEffectAudit;
  readonly fallbacks_served: Readonly<Record<string, number>>;
  readonly breaker_transitions: Readonly<Record<string, Readonly<Record<string, number>>>>;
  readonly p50_ms: number | null;
  readonly p95_ms: number | null;
  readonly p99_ms: number | null;
  readonly calls_offered: number;
  readonly calls_offered_by_tool: Readonly<Record<string, number>>;
  readonly calls_offered_while_down: number | null;
  readonly calls_reaching_dead_tool: number | null;
  /** calls_reaching_dead_tool ÷ calls_offered_while_down. */
  readonly dead_tool_ratio: number | null;
  readonly calls_failed: number;
  readonly calls_failed_by_tool: Readonly<Record<string, number>>;
  /** Per tool, failed calls by outcome and gRPC code. */
  readonly call_failures: Readonly<Record<string, Readonly<Record<string, number>>>>;
  readonly dead_windows: readonly DeadWindow[];
  readonly faults: readonly FaultEvent[];
  readonly sessions_bound_ms: number;
  readonly runtime_ms: number;
  readonly runner_cpu_ms: number;
  readonly containers: Readonly<Record<string, number>>;
  readonly notes: readonly string[];
}

function round(value: number, digits = 4): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Why a report whose sessions' step records could not all be read proves less than it seems to. */
function unverifiedNote(n: number): string {
  return `${n} ended session(s) had step records that could not be read (GetTrace failed after retries): whether they ended twice, saw a refund twice or answered from a cache or a degraded answer is not checked; the ledger's audit of unowned refunds still covers their money`;
}

export function computeReport(input: ReportInput): DrillReport {
  const { options, outcomes } = input;
  const ended = outcomes.filter((o) => o.state !== undefined && TERMINAL.has(o.state));
  const lost = outcomes.filter((o) => o.state === undefined).length;
  const hung = outcomes.filter((o) => o.state !== undefined && !TERMINAL.has(o.state)).length;
  const stopReasons: Record<string, number> = {};
  for (const o of ended)
    stopReasons[o.stopReason || o.state!.toLowerCase()] =
      (stopReasons[o.stopReason || o.state!.toLowerCase()] ?? 0) + 1;
  const done = { live: 0, cache: 0, degraded: 0 };
  for (const o of ended.filter((e) => e.state === "DONE" && e.trace)) {
    const from = o.trace?.servedFrom ?? [];
    if (from.includes("degraded")) done.degraded += 1;
    else if (from.includes("cache")) done.cache += 1;
    else done.live += 1;
  }
  const outcomeCounts: Record<string, number> = {};
  const notDone: Record<string, number> = {};
  const count = (into: Record<string, number>, key: string) => (into[key] = (into[key] ?? 0) + 1);
  let doneLive = 0;
  let doneDegraded = 0;
  const cachedAges: number[] = [];
  let doneCached = 0;
  for (const o of outcomes) {
    if (o.state === undefined) count(notDone, "lost");
    else if (!TERMINAL.has(o.state)) count(notDone, `hung in ${o.state}`);
    if (o.state === undefined || !TERMINAL.has(o.state)) continue;
    count(outcomeCounts, o.outcome || "unknown");
    const from = o.trace?.servedFrom ?? [];
    if (o.outcome === "not_done") count(notDone, o.outcomeReason || o.stopReason);
    else if (o.outcome === "partial" || from.includes("degraded")) doneDegraded += 1;
    else if (o.outcome === "succeeded" && from.includes("cache")) {
      doneCached += 1;
      cachedAges.push(...(o.trace?.cacheAgesMs ?? []));
    } else if (o.outcome === "succeeded") doneLive += 1;
  }
  cachedAges.sort((a, b) => a - b);
  const durations = ended
    .map((o) => o.durationMs)
    .filter((d): d is number => d !== undefined)
    .sort((a, b) => a - b);
  const twice = outcomes.filter((o) => o.trace && (o.trace.acceptedAnswers > 1 || o.trace.repeatedSteps > 0)).length;
  const unverified = ended.filter((o) => !o.trace).length;
  const target = input.tools[options.tool];
  const offeredWhileDown = input.deadWindows.reduce((sum, w) => sum + w.offered, 0);
  const reachingDead = input.deadWindows.reduce((sum, w) => sum + w.attempts, 0);
  const dead = input.deadWindows.length > 0 && options.scenario !== "kill-orchestrator";
  const failedByTool = Object.fromEntries(Object.entries(input.tools).map(([tool, f]) => [tool, f.failed]));
  return {
    scenario: options.scenario,
    tool: options.tool,
    kill:
      options.scenario === "kill-tool" || options.scenario === "flap" || options.scenario === "kill-orchestrator"
        ? options.kill
        : null,
    sessions_started: outcomes.length,
    sessions_ended: ended.length,
    sessions_lost: lost,
    sessions_hung: hung,
    sessions_ended_twice: twice,
    sessions_unverified: unverified,
    success_rate: outcomes.length === 0 ? 0 : round((outcomeCounts.succeeded ?? 0) / outcomes.length),
    done,
    outcomes: outcomeCounts,
    done_live: doneLive,
    done_cached: doneCached,
    done_cached_age_ms: { p50: percentile(cachedAges, 50) ?? null, max: cachedAges.at(-1) ?? null },
    done_degraded: doneDegraded,
    not_done: notDone,
    stop_reasons: stopReasons,
    refund_sessions: outcomes.filter((o) => o.kind === "refund").length,
    approvals_resolved: input.approvalsResolved,
    parks: input.parks,
    duplicate_side_effects: input.audit.duplicate,
    lost_side_effects: input.audit.lost,
    unowned_side_effects: input.audit.unowned,
    side_effects: input.audit,
    fallbacks_served: Object.fromEntries(Object.entries(input.tools).map(([tool, f]) => [tool, f.fallbacks])),
    breaker_transitions: Object.fromEntries(
      Object.entries(input.tools).map(([tool, f]) => [tool, f.breakerTransitions]),
    ),
    p50_ms: percentile(durations, 50) ?? null,
    p95_ms: percentile(durations, 95) ?? null,
    p99_ms: percentile(durations, 99) ?? null,
    calls_offered: target?.offered ?? 0,
    calls_offered_by_tool: Object.fromEntries(Object.entries(input.tools).map(([tool, f]) => [tool, f.offered])),
    calls_offered_while_down: dead ? offeredWhileDown : null,
    calls_reaching_dead_tool: dead ? reachingDead : null,
    dead_tool_ratio: dead && offeredWhileDown > 0 ? round(reachingDead / offeredWhileDown) : null,
    calls_failed: Object.values(failedByTool).reduce((a, b) => a + b, 0),
    calls_failed_by_tool: failedByTool,
    call_failures: Object.fromEntries(Object.entries(input.tools).map(([tool, f]) => [tool, f.failures])),
    dead_windows: input.deadWindows,
    faults: input.faults,
    sessions_bound_ms: input.boundMs,
    runtime_ms: Math.round(input.runtimeMs),
    runner_cpu_ms: Math.round(input.runnerCpuMs),
    containers: input.containers,
    notes: unverified > 0 ? [...input.notes, unverifiedNote(unverified)] : input.notes,
  };
}
