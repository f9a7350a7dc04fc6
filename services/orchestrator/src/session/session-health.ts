// A session's health score, 0..100 (higher is healthier), for operators scanning many
// sessions: it falls with the share of the step budget used, the share of tool results not
// answered live (failed, or a fallback in their place), and the 95th percentile tool latency
// against a 2 s reference. An ended session is capped by how it ended: one that stopped without
// its answer (FAILED, CANCELLED, any stop reason but done) or did not do its task (outcome
// not_done) scores at most 20, a partial outcome at most 50; a session that succeeded, or still
// runs, keeps its score.
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";
import type { SessionRecord } from "../store/session-store.js";
import { storedOutcome } from "./data.js";
import { isTerminal } from "./session-state.js";

const LATENCY_REFERENCE_MS = 2000;
/** The most an ended session scores when the user did not get what was asked for, or only part of it. */
export const HEALTH_CAP = { notDone: 20, partial: 50 } as const;

type Observation = Extract<HistoryItem, { kind: "observation" }>;

/**
 * How much one result counts against the score, 0..1. A degraded stand-in (ok, but the declared
 * empty answer) tells nothing, as a failure does. A cached answer is real data, only stale, and
 * the tool was down all the same: it counts half.
 */
function missWeight({ ok, servedFrom }: ResultEnvelope): number {
  if (!ok || servedFrom === "degraded") return 1;
  return servedFrom === "cache" ? 0.5 : 0;
}

/** The most an ended session can score, by its state, stop reason and stored outcome; 100 while it runs. */
function capOf(s: SessionRecord): number {
  if (!isTerminal(s.state)) return 100;
  const outcome = storedOutcome(s)?.kind;
  if (s.state !== "DONE" || (s.stopReason ?? "done") !== "done" || outcome === "not_done") return HEALTH_CAP.notDone;
  return outcome === "partial" ? HEALTH_CAP.partial : 100;
}

export function healthScore(s: SessionRecord): number {
  const history = ((s.context.history ?? []) as unknown as HistoryItem[]).filter(
    (h): h is Observation => h.kind === "observation",
  );
  const stepsUsed = Math.min(1, s.usage.steps / Math.max(1, s.budget.maxSteps));
  const errorRate =
    history.length === 0 ? 0 : history.reduce((sum, h) => sum + missWeight(h.envelope), 0) / history.length;
  // The host makes a degraded answer itself and records it as taking 0 ms: not a tool's latency.
  const latencies = history
    .filter((h) => h.envelope.servedFrom !== "degraded")
    .map((h) => h.latencyMs ?? 0)
    .sort((a, b) => a - b);
  const p95 =
    latencies.length === 0 ? 0 : latencies[Math.min(latencies.length - 1, Math.floor(0.95 * latencies.length))]!;
  const slow = Math.min(1, p95 / LATENCY_REFERENCE_MS);
  return Math.max(0, Math.min(capOf(s), Math.round(100 * (1 - 0.3 * stepsUsed - 0.5 * errorRate - 0.2 * slow))));
}
