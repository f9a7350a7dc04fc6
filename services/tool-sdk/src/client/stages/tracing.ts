// A client span per call, whose context every attempt sends as traceparent; at its end, where the
// answer came from, the attempts sent, the breaker's state and whether a hedge was sent.
import { context as otelContext, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { status } from "@grpc/grpc-js";
import { tracer } from "../../tracing.js";
import type { CallError } from "../call-error.js";
import type { ClientCall, ClientInterceptor } from "../chain.js";
import type { BreakerState } from "./breaker.js";

export function tracingStage(breakerState: () => BreakerState): ClientInterceptor {
  return (next) => async (call) => {
    const { tool, method } = call.target;
    const span = tracer.startSpan(`${method.parent.typeName}/${method.name}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        "rpc.system": "grpc",
        "rpc.service": method.parent.typeName,
        "rpc.method": method.name,
        "loopguard.tool": tool,
      },
    });
    call.spanContext = trace.setSpan(otelContext.active(), span);
    const end = ({ sent, outcome }: ClientCall, servedFrom: string) => {
      span.setAttributes({
        "loopguard.served_from": servedFrom,
        "loopguard.attempts": sent.attempts,
        "loopguard.breaker_state": breakerState(),
        "loopguard.hedged": outcome.hedged,
      });
      if (outcome.winner > 0) span.setAttribute("loopguard.winning_attempt", outcome.winner);
      span.end();
    };
    try {
      const response = await next(call);
      end(call, call.outcome.source);
      return response;
    } catch (thrown) {
      const error = thrown as CallError;
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.reason ?? status[error.code] });
      end(call, "none");
      throw error;
    }
  };
}
