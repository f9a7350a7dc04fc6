// The model call's span: a child of the session's policy.decide span, named for the model, with
// token counts and no prompt text; its context goes out as the HTTP call's W3C `traceparent`, so
// an endpoint that traces (a gateway, a local server) joins the session's trace.
import { context, type Span, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";

// The propagator itself, not the global one: the header goes out whether or not an SDK registered a propagator.
const propagator = new W3CTraceContextPropagator();
const tracer = trace.getTracer("@loopguard/orchestrator");

/** Runs `fn` in a span for one chat completion, handing it the headers that carry the span's context. */
export function modelCallSpan<T>(model: string, maxTokens: number, fn: (span: Span, headers: Record<string, string>) => Promise<T>): Promise<T> {
  const span = tracer.startSpan(`chat ${model}`, {
    kind: SpanKind.CLIENT,
    attributes: { "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.request.max_tokens": maxTokens },
  });
  const active = trace.setSpan(context.active(), span);
  const headers: Record<string, string> = {};
  propagator.inject(active, headers, { set: (carrier, key, value) => (carrier[key] = value) });
  return context
    .with(active, () => fn(span, headers))
    .catch((error: unknown) => {
      // The error's class only: its message may quote the endpoint's reply.
      span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.name : "error" });
      throw error;
    })
    .finally(() => span.end());
}
