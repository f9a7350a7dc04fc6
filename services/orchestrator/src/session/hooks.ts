// What the orchestrator's metrics and log hear of sessions: every move and stop (from
// SessionMoves, the one path that moves a session), every observed tool result, context alarms.
import type { Logger } from "@loopguard/tool-sdk";
import type { SessionMetrics } from "../governance/session-metrics.js";
import type { RunnerDeps } from "./kit.js";
import type { MoveDeps } from "./moves.js";
import { storedOutcome } from "./data.js";
import { EFFECT_UNKNOWN, reasonLabel } from "./outcome.js";
import { sessionTraceId } from "./trace-id.js";

export type SessionHooks = Required<
  Pick<MoveDeps, "onTransition" | "onStopped" | "onLateSpend"> &
    Pick<RunnerDeps, "onContext" | "onModelCall" | "onUsageDisbelieved" | "onStep">
>;

export function sessionHooks(log: Logger, metrics: SessionMetrics | undefined): SessionHooks {
  return {
    onTransition: (to) => metrics?.transitions.inc({ to }),
    onStopped: (s) => {
      metrics?.stops.inc({ stop_reason: s.stopReason ?? "unknown" });
      const outcome = storedOutcome(s);
      if (outcome) metrics?.outcomes.inc({ outcome: outcome.kind, reason: reasonLabel(outcome.reason) });
      if (outcome?.reason.startsWith(EFFECT_UNKNOWN)) {
        metrics?.effectsUnknown.inc();
        log.warn("a session ended with an irreversible call whose outcome is unknown: its hold is kept", {
          session_id: s.id,
          reason: outcome.reason,
          trace_id: sessionTraceId(s),
        });
      }
      metrics?.stepsPerSession.observe(s.usage.steps);
      metrics?.takeoversPerSession.observe(s.usage.takeovers ?? 0);
      log.info("session ended", {
        session_id: s.id,
        state: s.state,
        reason: s.stopReason ?? "",
        outcome: outcome?.kind ?? "",
        count: s.usage.steps,
        takeovers: s.usage.takeovers ?? 0,
        trace_id: sessionTraceId(s),
      });
    },
    onLateSpend: (s, spend, fate, error) => {
      metrics?.lateSpend.inc({ fate });
      if (fate !== "store_failed") return;
      log.warn("a session's spend was not charged: the store did not take the charge", {
        session_id: s.id,
        reason: fate,
        tokens: spend.tokens,
        cost_micros: spend.costMicros,
        ...(error ? { error_message: error instanceof Error ? error.message : String(error) } : {}),
        trace_id: sessionTraceId(s),
      });
    },
    onContext: (s, governed) => {
      metrics?.promptTokens.observe(governed.tokens);
      if (governed.compressed > 0) metrics?.contextCompression.observe(governed.tokens / governed.tokensBefore);
      if (!governed.alarm) return;
      metrics?.contextAlarms.inc();
      log.warn("session context at 80% of the model window", {
        session_id: s.id,
        count: governed.tokens,
        trace_id: sessionTraceId(s),
      });
    },
    onModelCall: (_model, _usage, costMicros) => metrics?.modelCostMicros.inc(costMicros),
    onUsageDisbelieved: (s, model, reported, charged) => {
      metrics?.usageDisbelieved.inc({ model });
      const told = reported.input + reported.output;
      const count = charged.input + charged.output;
      const why =
        told > count
          ? "more than the host believes (twice its count of the prompt, the reply's max tokens): that most is charged"
          : "where the host counted more: the host's count is charged";
      log.warn(`a model endpoint reported ${told} tokens ${why}`, {
        session_id: s.id,
        model,
        count,
        trace_id: sessionTraceId(s),
      });
    },
    onStep: (_s, tool, envelope) => {
      metrics?.toolResults.inc({
        tool,
        outcome: envelope.ok ? "ok" : (envelope.error?.code ?? "error"),
        served_from: envelope.servedFrom,
      });
      metrics?.costMicros.inc(envelope.costMicros);
    },
  };
}
