// Step records leave the pod as OpenTelemetry log records, to the collector's logs pipeline: the
// same redacted payload the JSONL file and the store get (never the raw step), with the session
// and trace ids as attributes and the step's span as the record's trace context, so a backend
// links a step to its trace. The logger provider is the one telemetry.ts starts when an OTLP
// endpoint is set; without one the global logger is a no-op and this costs nothing.
import { type Context, ROOT_CONTEXT, TraceFlags, trace } from "@opentelemetry/api";
import { type AnyValueMap, logs, SeverityNumber } from "@opentelemetry/api-logs";
import type { StepRecord } from "../store/session-store.js";

export const STEP_LOG_SCOPE = "loopguard.orchestrator.steps";

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The span a step record names in its traceparent, as a log record's context. */
function stepContext(traceparent: unknown): Context | undefined {
  const match = typeof traceparent === "string" ? TRACEPARENT.exec(traceparent) : null;
  if (!match) return undefined;
  const traceFlags = Number.parseInt(match[3] ?? "0", 16) & TraceFlags.SAMPLED;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: match[1] ?? "",
    spanId: match[2] ?? "",
    traceFlags,
    isRemote: true,
  });
}

/** Emits one committed (and already redacted) step record. */
export function exportStep(step: StepRecord): void {
  const { payload } = step;
  const context = stepContext(payload.traceparent);
  logs.getLogger(STEP_LOG_SCOPE).emit({
    eventName: "loopguard.step",
    timestamp: step.at,
    severityNumber: SeverityNumber.INFO,
    severityText: "INFO",
    body: payload as AnyValueMap,
    attributes: {
      "session.id": String(payload.session_id ?? ""),
      "loopguard.trace_id": String(payload.trace_id ?? ""),
      "loopguard.step": step.step,
      "loopguard.state_after": String(payload.state_after ?? ""),
    },
    ...(context ? { context } : {}),
  });
}
