// A session's health score, 0..100 (higher is healthier), for operators scanning many
// sessions: it falls with the share of the step budget used, the share of tool calls that
// failed, and the 95th percentile tool latency against a 2 s reference.
import type { HistoryItem } from "../policies/policy.js";
import type { SessionRecord } from "../store/session-store.js";

const LATENCY_REFERENCE_MS = 2000;

export function healthScore(s: SessionRecord): number {
  const history = ((s.context.history ?? []) as unknown as HistoryItem[]).filter((h) => h.kind === "observation");
  const stepsUsed = Math.min(1, s.usage.steps / Math.max(1, s.budget.maxSteps));
  const errorRate =
    history.length === 0
      ? 0
      : history.filter((h) => h.kind === "observation" && !h.envelope.ok).length / history.length;
  const latencies = history.map((h) => (h.kind === "observation" ? (h.latencyMs ?? 0) : 0)).sort((a, b) => a - b);
  const p95 =
    latencies.length === 0 ? 0 : latencies[Math.min(latencies.length - 1, Math.floor(0.95 * latencies.length))]!;
  const slow = Math.min(1, p95 / LATENCY_REFERENCE_MS);
  return Math.max(0, Math.round(100 * (1 - 0.3 * stepsUsed - 0.5 * errorRate - 0.2 * slow)));
}
