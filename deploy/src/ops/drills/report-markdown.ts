// The drill report for people: the figures that answer "what did the agents experience?" first.
import type { DrillReport } from "./report.js";

function ms(value: number | null): string {
  return value === null ? "–" : `${value} ms`;
}

function counts(record: Readonly<Record<string, number>>): string {
  const entries = Object.entries(record).filter(([, n]) => n > 0);
  return entries.length === 0 ? "none" : entries.map(([k, n]) => `${k} ${n}`).join(", ");
}

export function renderMarkdown(r: DrillReport, startedAt: Date): string {
  const percent = (x: number) => `${(x * 100).toFixed(2)} %`;
  const lines = [
    `# Drill ${r.scenario} — ${r.tool}${r.kill ? ` (kill ${r.kill})` : ""}`,
    "",
    `Started ${startedAt.toISOString()}; ${r.sessions_started} sessions started at once (${r.refund_sessions} refunds, ${r.sessions_started - r.refund_sessions} knowledge questions); containers ${counts(r.containers)}.`,
    "",
    "## Sessions",
    "",
    "| Figure | Value |",
    "|---|---|",
    `| started / ended | ${r.sessions_started} / ${r.sessions_ended} |`,
    `| lost (never acknowledged, or gone from the store) | ${r.sessions_lost} |`,
    `| hung (not ended within ${(r.sessions_bound_ms / 1000).toFixed(0)} s) | ${r.sessions_hung} |`,
    `| ended twice | ${r.sessions_ended_twice} |`,
    `| unverified (step records unreadable) | ${r.sessions_unverified} |`,
    `| success rate (outcome succeeded ÷ started) | ${percent(r.success_rate)} |`,
    `| succeeded live / from cache (age p50, max) / answered degraded | ${r.done_live} / ${r.done_cached} (${ms(r.done_cached_age_ms.p50)}, ${ms(r.done_cached_age_ms.max)}) / ${r.done_degraded} |`,
    `| not done, by reason | ${counts(r.not_done)} |`,
    `| outcomes | ${counts(r.outcomes)} |`,
    `| ended done with live answers / from cache / degraded | ${r.done.live} / ${r.done.cache} / ${r.done.degraded} |`,
    `| stop reasons | ${counts(r.stop_reasons)} |`,
    `| session duration p50 / p95 / p99 | ${ms(r.p50_ms)} / ${ms(r.p95_ms)} / ${ms(r.p99_ms)} |`,
    `| approvals resolved by the second subject | ${r.approvals_resolved} |`,
    `| times sessions parked to wait for a tool | ${r.parks} |`,
    "",
    "## Side effects (billing ledger)",
    "",
    "| Figure | Value |",
    "|---|---|",
    `| refunds this run made (ledger) / sessions that saw theirs succeed | ${r.side_effects.refundsInLedger} / ${r.side_effects.refundsReported} |`,
    `| DONE sessions whose cited refund is in the ledger exactly once | ${r.side_effects.doneRefundsExactlyOnce} |`,
    `| duplicate | ${r.duplicate_side_effects} |`,
    `| lost (reported, not in the ledger) | ${r.lost_side_effects} |`,
    `| unowned (in the ledger, no session owns it) | ${r.unowned_side_effects} |`,
    "",
    `Matched by ${r.side_effects.method}.`,
    ...(r.side_effects.examples.length > 0 ? ["", ...r.side_effects.examples.map((e) => `- ${e}`)] : []),
    "",
    "## Tool calls",
    "",
    "| Tool | Offered | Failed | Fallbacks served | Breaker transitions |",
    "|---|---|---|---|---|",
    ...Object.keys(r.calls_failed_by_tool).map(
      (tool) =>
        `| ${tool} | ${r.calls_offered_by_tool[tool] ?? 0} | ${r.calls_failed_by_tool[tool]}${r.calls_failed_by_tool[tool] ? ` (${counts(r.call_failures[tool] ?? {})})` : ""} | ${r.fallbacks_served[tool] ?? 0} | ${counts(r.breaker_transitions[tool] ?? {})} |`,
    ),
    "",
    r.calls_reaching_dead_tool === null
      ? `No window with ${r.tool} dead in this scenario.`
      : `While ${r.tool} was dead (${r.dead_windows.length} window(s), ${r.dead_windows.map((w) => `${(w.fromMs / 1000).toFixed(1)}–${(w.toMs / 1000).toFixed(1)} s`).join(", ")}): ` +
        `${r.calls_offered_while_down} calls offered, ${r.calls_reaching_dead_tool} RPC attempts reached it (retries included): ratio ${r.dead_tool_ratio ?? "–"}.`,
    "",
    "## Faults",
    "",
    ...r.faults.map((f) => `- ${(f.atMs / 1000).toFixed(1)} s: ${f.what}`),
    "",
    "## Cost of the run",
    "",
    `Runtime ${(r.runtime_ms / 1000).toFixed(1)} s (containers up and down included); the runner's own CPU ${r.runner_cpu_ms} ms.`,
    ...(r.notes.length > 0 ? ["", "## Notes", "", ...r.notes.map((n) => `- ${n}`)] : []),
    "",
  ];
  return lines.join("\n");
}
