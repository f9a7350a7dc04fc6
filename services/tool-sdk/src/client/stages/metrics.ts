// The client's metrics: one outcome per call (outermost, so every outcome counts), and the standard
// gRPC client twins per attempt on the wire.
import { status } from "@grpc/grpc-js";
import type { CallError } from "../call-error.js";
import type { ClientInterceptor } from "../chain.js";
import type { ClientMetrics } from "../client-metrics.js";

const REFUSAL_OUTCOMES: Readonly<Record<string, string>> = {
  CLIENT_VALIDATION_FAILED: "client_invalid",
  BREAKER_OPEN: "breaker_rejected",
  BULKHEAD_FULL: "bulkhead_rejected",
  ANSWER_TOO_LARGE: "answer_too_large",
};

export function callMetricsStage(metrics: ClientMetrics): ClientInterceptor {
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
