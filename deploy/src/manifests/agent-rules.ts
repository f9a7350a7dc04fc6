// Alerts on what the agents do, from the orchestrator's own metrics: sessions that end without an
// answer or go round in circles, tools answered by fallbacks or cut off by a breaker, approvals
// the expiry sweep left behind, sessions waiting out an outage with little budget left, step-trace
// files that stay unwritable, replicas that keep losing their sessions' leases, and spend that no
// session's usage shows.
// Ratios carry a minimum count, so an idle suite (0/0) or a handful of sessions does not alert.
import type { DescService } from "@bufbuild/protobuf";
import { ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { BREAKER_STATE_VALUE } from "@loopguard/tool-sdk";
import { percent, runbookUrl, SEVERITY } from "./alert-conventions.js";
import type { Rule, RuleGroup } from "./slo-rules.js";

export const AGENT_RULE_GROUP = "loopguard-agents";

/** Sessions ended over `window`; a share of them is judged only past `minSessions`. */
const SESSIONS = { window: "30m", minSessions: 20, for: "10m" } as const;
const STOP_REASONS_RATIO = 0.25;
const NOT_SUCCEEDED_RATIO = 0.25;
const NO_PROGRESS_RATIO = 0.1;
const FALLBACKS = { window: "10m", ratio: 0.1, minCalls: 20, for: "10m" } as const;
/**
 * Not closed at any scrape of the window and reopened within `reopenedMinutes`, for `for`:
 * refusing calls. "Reopened" looks back further than `for`, so a breaker reopened by each call
 * of a tool called less than once every 5 minutes (a half-open probe that fails) holds it.
 */
const BREAKER = { windowMinutes: 5, reopenedMinutes: 15, forMinutes: 5 } as const;
const GAUGE_FOR = "5m";
/** Step-trace file failures in every `window` for `for`. */
const TRACE_FILES = { window: "5m", for: "15m" } as const;
/** Leases lost in every `window` for `for`. */
const LEASES = { window: "10m", for: "15m" } as const;
/** Spend that no session's usage shows, looked for over `window`. */
const UNCHARGED = { window: "1h", for: "0m" } as const;
/** Model prompts at 80% of the window over `window`, judged past `minPrompts`. */
const CONTEXT = { window: "30m", ratio: 0.05, minPrompts: 20, for: "10m" } as const;
/** The patrol is meant to run daily: a day and two hours without a run means it stopped. */
const PATROL_MAX_AGE_HOURS = 26;
/** The orchestrator's scrape job: the patrol gauges are its, and its up series says how long the suite has run. */
const ORCHESTRATOR_JOB = "orchestrator";

interface AgentAlert {
  readonly name: string;
  readonly expr: string;
  readonly for: string;
  readonly severity: string;
  readonly summary: string;
  readonly description: string;
}

function rule(a: AgentAlert): Rule {
  const annotations = { summary: a.summary, description: a.description, runbook_url: runbookUrl(a.name.toLowerCase()) };
  return { alert: a.name, expr: a.expr, for: a.for, labels: { severity: a.severity }, annotations };
}

/** The share of sessions ended over the window whose `metric` labels match `matcher`, with the minimum-count guard. */
function endedShare(metric: string, matcher: string, ratio: number): string {
  const ended = `sum(increase(${metric}[${SESSIONS.window}]))`;
  const matching = `sum(increase(${metric}{${matcher}}[${SESSIONS.window}]))`;
  return `${matching}\n/\n${ended}\n> ${ratio}\nand\n${ended} >= ${SESSIONS.minSessions}`;
}

const stopShare = (matcher: string, ratio: number) => endedShare("loopguard_session_stops_total", matcher, ratio);

const calls = (matcher: string) =>
  `sum by (tool) (increase(loopguard_tool_client_calls_total${matcher}[${FALLBACKS.window}]))`;
const notClosed = `min_over_time(loopguard_tool_breaker_state[${BREAKER.windowMinutes}m]) >= ${BREAKER_STATE_VALUE["half-open"]}`;
const reopened = `increase(loopguard_tool_breaker_transitions_total{state="open"}[${BREAKER.reopenedMinutes}m]) > 0`;
const endedOver = `the last ${SESSIONS.window} (at least ${SESSIONS.minSessions} ended)`;

/**
 * Per tool, the answers sessions got from a fallback: the client's (cache or degraded), and the
 * degraded answers the host gives itself when a tool stays down (session/park.ts; sessions call
 * with degraded: false, so the client counts those calls as errors). The host's are counted by
 * the model-visible name of each method (kb_search_search), so each tool's names, as the
 * orchestrator's registry makes them, are summed under the tool's label. A tool with no series of
 * either kind counts 0, so the sum keeps every tool called.
 */
function fallbacksServed(tools: readonly DescService[]): string {
  const names = new Map<string, string[]>();
  for (const t of new ToolRegistry(tools).list()) names.set(t.tool, [...(names.get(t.tool) ?? []), t.name]);
  const none = `${calls("")} * 0`;
  const host = [...names].map(
    ([tool, of]) =>
      `label_replace(sum(increase(loopguard_session_tool_results_total{served_from="degraded",tool=~"${of.join("|")}"}[${FALLBACKS.window}])), "tool", "${tool}", "", "")`,
  );
  return `(\n${calls('{outcome=~"fallback_.*"}')}\nor\n${none}\n)\n+\n(\n${[...host, none].join("\nor\n")}\n)`;
}

const agentAlerts = (tools: readonly DescService[]): readonly AgentAlert[] => [
  {
    name: "SessionStopReasonsHigh",
    expr: stopShare('stop_reason!="done"', STOP_REASONS_RATIO),
    for: SESSIONS.for,
    severity: SEVERITY.ticket,
    summary: `More than ${percent(STOP_REASONS_RATIO)} of sessions end without an answer`,
    description: `{{ $value | humanizePercentage }} of the sessions that ended in ${endedOver} stopped with a reason other than done.`,
  },
  {
    // A session can stop `done` without doing its task (no refund made, a degraded answer): what the user got is its outcome.
    name: "SessionOutcomesNotSucceededHigh",
    expr: endedShare("loopguard_session_outcomes_total", 'outcome!="succeeded"', NOT_SUCCEEDED_RATIO),
    for: SESSIONS.for,
    severity: SEVERITY.ticket,
    summary: `More than ${percent(NOT_SUCCEEDED_RATIO)} of sessions do not do what they were asked`,
    description: `{{ $value | humanizePercentage }} of the sessions that ended in ${endedOver} had an outcome other than succeeded (partial: a degraded answer; not_done: the task's effect not made, or stopped short).`,
  },
  {
    name: "SessionNoProgressHigh",
    expr: stopShare('stop_reason="no_progress"', NO_PROGRESS_RATIO),
    for: SESSIONS.for,
    severity: SEVERITY.ticket,
    summary: `More than ${percent(NO_PROGRESS_RATIO)} of sessions stop going round in circles`,
    description: `{{ $value | humanizePercentage }} of the sessions that ended in ${endedOver} stopped with no_progress (the same tool call, arguments and result three times).`,
  },
  {
    name: "ToolFallbacksServedHigh",
    expr: `(\n${fallbacksServed(tools)}\n)\n/\n${calls("")}\n> ${FALLBACKS.ratio}\nand\n${calls("")} >= ${FALLBACKS.minCalls}`,
    for: FALLBACKS.for,
    severity: SEVERITY.ticket,
    summary: `More than ${percent(FALLBACKS.ratio)} of {{ $labels.tool }} calls are answered by a fallback`,
    description: `{{ $value | humanizePercentage }} of the calls to {{ $labels.tool }} over the last ${FALLBACKS.window} were answered from the cache or degraded (by the client, or by the orchestrator while the tool stayed down), not by the tool.`,
  },
  {
    // A breaker left half-open by a caller gone idle refuses nothing: it must also have reopened lately.
    name: "ToolBreakerOpen",
    expr: `max by (tool) (\n  ${notClosed}\n  and ignoring (state)\n  ${reopened}\n)`,
    for: `${BREAKER.forMinutes}m`,
    severity: SEVERITY.page,
    summary: "The circuit breaker for {{ $labels.tool }} has stayed open",
    description: `The orchestrator's breaker for {{ $labels.tool }} has not closed for ${BREAKER.windowMinutes + BREAKER.forMinutes}m and keeps reopening (within every ${BREAKER.reopenedMinutes}m): calls to the tool are refused.`,
  },
  // Every orchestrator replica reports the same store, so max() and not sum().
  {
    name: "ApprovalsOverdue",
    expr: "max(loopguard_approvals_overdue) > 0",
    for: GAUGE_FOR,
    severity: SEVERITY.ticket,
    summary: "Sessions wait for approvals that have expired",
    description: `{{ $value }} sessions have been AWAITING_APPROVAL past their approval's expiry for ${GAUGE_FOR}: the expiry sweep should have ended them.`,
  },
  {
    name: "SessionsParkedNearDeadline",
    expr: "max(loopguard_sessions_parked_near_deadline) > 0",
    for: GAUGE_FOR,
    severity: SEVERITY.ticket,
    summary: "Parked sessions are running out of wall-clock budget",
    description: `For ${GAUGE_FOR} PARKED sessions have had less than 20% of their wall-clock budget left (now {{ $value }}): they will stop with deadline.`,
  },
  // A failure pauses the files 10 s and the next step tries a new file: failures in every 5-minute
  // window for TRACE_FILES.for mean the files stay broken, not one full moment.
  {
    name: "StepTraceFilesFailing",
    expr: `sum by (instance) (increase(loopguard_trace_file_errors_total[${TRACE_FILES.window}])) > 0`,
    for: TRACE_FILES.for,
    severity: SEVERITY.ticket,
    summary: "An orchestrator cannot write its step-trace files",
    description: `{{ $labels.instance }} keeps failing to open or write its step-trace JSONL files (failures in every ${TRACE_FILES.window} for ${TRACE_FILES.for}): its steps reach only the store and the OTLP logs, not the files log shippers tail.`,
  },
  // One stall (a long GC pause, a node under pressure) lets a lease or a few run out and costs a re-sent
  // read; losses in every 10-minute window for LEASES.for mean the replica keeps stalling.
  {
    name: "SessionLeasesLost",
    expr: `sum by (instance) (increase(loopguard_session_leases_lost_total[${LEASES.window}])) > 0`,
    for: LEASES.for,
    severity: SEVERITY.ticket,
    summary: "An orchestrator keeps letting the leases of sessions it runs run out",
    description: `leases of sessions {{ $labels.instance }} was running have run out in every ${LEASES.window} for ${LEASES.for}: it stalls longer than ORCHESTRATOR_LEASE_TTL_MS, so its sessions pause and the reads a lost lease cut off are sent again.`,
  },
  {
    // Each one is money spent that a session's usage (and its budget) does not show: a ticket, not a page.
    name: "SessionSpendNotCharged",
    expr: `sum by (instance) (increase(loopguard_session_late_spend_total{fate="store_failed"}[${UNCHARGED.window}])) > 0`,
    for: UNCHARGED.for,
    severity: SEVERITY.ticket,
    summary: "Model or tool spend was not charged to any session",
    description: `{{ $labels.instance }} could not charge the spend of {{ $value | humanize }} model or tool answers over the last ${UNCHARGED.window}: the store did not take the charge, so the sessions' usage shows less than was spent, and their budgets did not count it.`,
  },
  {
    // Each one is a money call that may have been made: a person reconciles it with the tool's records.
    name: "SessionEffectsUnknown",
    expr: `sum by (instance) (increase(loopguard_session_effects_unknown_total[${UNCHARGED.window}])) > 0`,
    for: UNCHARGED.for,
    severity: SEVERITY.ticket,
    summary: "A session ended not knowing whether its irreversible call was made",
    description: `{{ $labels.instance }} ended {{ $value | humanize }} sessions over the last ${UNCHARGED.window} with an irreversible call sent and its outcome never settled (outcome effect_unknown): it may have been made, and its amount stays held against the entity's and customer's totals until someone checks the tool's records.`,
  },
  {
    // Counted after compression: prompts this large are mostly task and latest results, which are never summarised.
    name: "ModelContextNearWindow",
    expr: `sum(increase(loopguard_session_context_alarms_total[${CONTEXT.window}]))\n/\nsum(increase(loopguard_model_prompt_tokens_count[${CONTEXT.window}]))\n> ${CONTEXT.ratio}\nand\nsum(increase(loopguard_model_prompt_tokens_count[${CONTEXT.window}])) >= ${CONTEXT.minPrompts}`,
    for: CONTEXT.for,
    severity: SEVERITY.ticket,
    summary: `More than ${percent(CONTEXT.ratio)} of model prompts reach 80% of the context window`,
    description: `{{ $value | humanizePercentage }} of the model prompts over the last ${CONTEXT.window} (at least ${CONTEXT.minPrompts}) were at 80% of the model's context window after compression: sessions will soon stop with max_tokens.`,
  },
  // The last patrol run, as every replica reads it from the store: max() and not sum().
  {
    name: "PatrolSuccessBelowThreshold",
    expr: "max(loopguard_patrol_success_ratio) < max(loopguard_patrol_threshold)",
    for: GAUGE_FOR,
    severity: SEVERITY.ticket,
    summary: "The last patrol run of the golden set is below its threshold",
    description:
      "The last `pnpm patrol` run matched {{ $value | humanizePercentage }} of the golden set's expectations, under the threshold it was run with: the agent no longer does some reference tasks as it should.",
  },
  {
    name: "PatrolRunMissing",
    // The gauges exist only once a run is recorded: with none ever, the second branch fires once the
    // orchestrator was already scraped PATROL_MAX_AGE_HOURS ago (not a new install). `offset` and
    // not process_start_time_seconds: a replica restarted by every deploy would keep that one young.
    // Its value, 0, is "never" to the description.
    expr: `time() - max(loopguard_patrol_last_run_timestamp_seconds) > ${PATROL_MAX_AGE_HOURS} * 3600\nor\nabsent(loopguard_patrol_last_run_timestamp_seconds) * 0\nand on ()\ncount(up{job="${ORCHESTRATOR_JOB}"} offset ${PATROL_MAX_AGE_HOURS}h) > 0`,
    for: GAUGE_FOR,
    severity: SEVERITY.ticket,
    summary: `No patrol run for more than ${PATROL_MAX_AGE_HOURS} hours`,
    description: `{{ if $value }}The last patrol run finished {{ $value | humanizeDuration }} ago{{ else }}No patrol run has been recorded, and the orchestrator has been scraped for more than ${PATROL_MAX_AGE_HOURS} hours{{ end }}: the daily patrol (\`pnpm patrol\`) has stopped, and regressions go unseen.`,
  },
];

/** One group, evaluated against the orchestrator's metrics (every replica of it); `tools`: the services its sessions call. */
export function agentRuleGroup(tools: readonly DescService[]): RuleGroup {
  return { name: AGENT_RULE_GROUP, rules: agentAlerts(tools).map(rule) };
}
