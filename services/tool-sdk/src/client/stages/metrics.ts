// The client's metrics: one outcome per call (outermost, so every outcome counts), and the standard
// gRPC client twins per attempt on the wire.
import { status } from "@grpc/grpc-js";
import type { CallError } from "../call-error.js";
import type { CallTarget, ClientInterceptor } from "../chain.js";
import type { ClientMetrics } from "../client-metrics.js";
import type { Fallback } from "./cache.js";

const REFUSAL_OUTCOMES: Readonly<Record<string, string>> = {
  CLIENT_VALIDATION_FAILED: "client_invalid",
  BREAKER_OPEN: "breaker_rejected",
  BULKHEAD_FULL: "bulkhead_rejected",
  ANSWER_TOO_LARGE: "answer_too_large",
};

/**
 * The live failures a fallback is counted with when a tool is down, slow or overloaded (or its
 * breaker or the bulkhead refuses). A fallback for any other code (a tool's own INTERNAL, say)
 * gets its series on first use: one per code a failure can carry would multiply the series of every
 * method for outcomes an outage does not bring.
 */
const OUTAGE_CODES = [status.UNAVAILABLE, status.DEADLINE_EXCEEDED, status.RESOURCE_EXHAUSTED] as const;

/**
 * Counts one outcome per call of `plan.target`. Its calls answered live, and the fallbacks its plan
 * can serve in an outage, are at 0 from the start, as ToolFallbacksServedHigh takes increase() of
 * them: a series that first appears holding its count loses it. Errors and refusals are not: they
 * are counted by a code each, of many.
 */
export function callMetricsStage(
  metrics: ClientMetrics,
  plan: { readonly target: CallTarget; readonly fallback: Fallback },
): ClientInterceptor {
  const { tool, method } = plan.target;
  const fallbacks = [
    ...(plan.fallback.cacheable ? ["fallback_cache"] : []),
    ...(plan.fallback.emptyFallback ? ["fallback_degraded"] : []),
  ];
  const series = [
    { outcome: "ok", grpc_code: status[status.OK] },
    ...fallbacks.flatMap((outcome) => OUTAGE_CODES.map((code) => ({ outcome, grpc_code: status[code] }))),
  ];
  for (const labels of series) metrics.calls.inc({ tool, method: method.name, ...labels }, 0);
  return (next) => async (call) => {
    const count = (outcome: string, code: status) =>
      metrics.calls.inc({ tool: call.target.tool, method: call.target.method.name, outcome, grpc_code: status[code] });
    try {
      const response = await next(call);
      const { source, liveError } = call.outcome;
      count(source === "live" ? "ok" : `fallback_${source}`, liveError?.code ?? status.OK);
      return response;
    } catch (thrown) {
      const error = thrown as CallError;
      count(REFUSAL_OUTCOMES[error.reason ?? ""] ?? "error", error.code);
      throw error;
    }
  };
}

export function attemptMetricsStage(metrics: ClientMetrics): ClientInterceptor {
  return (next) => (call) => {
    const { method } = call.target;
    const labels = { grpc_type: "unary", grpc_service: method.parent.typeName, grpc_method: method.name };
    const started = performance.now();
    const count = (code: status) => {
      const done = { ...labels, grpc_code: status[code] };
      metrics.handled.inc(done);
      metrics.handlingSeconds.observe(done, (performance.now() - started) / 1000);
    };
    return next(call).then(
      (response) => {
        count(status.OK);
        return response;
      },
      (thrown: unknown) => {
        count((thrown as CallError).code);
        throw thrown;
      },
    );
  };
}
