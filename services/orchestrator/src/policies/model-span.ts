// The model call's span: a child of the session's policy.decide span, named for the model, with
// token counts and no prompt text; its context goes out as the HTTP call's W3C `traceparent`, so
// an endpoint that traces (a gateway, a local server) joins the session's trace.
import { type Context, context, type Span, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";

// The propagator itself, not the global one: the header goes out whether or not an SDK registered a propagator.
const propagator = new W3CTraceContextPropagator();
const tracer = trace.getTracer("@loopguard/orchestrator");

/**
 * Runs `fn` in a span for one chat completion under `parent` (the active context when not given),
 * handing it the headers that carry the span's context.
 */
export function modelCallSpan<T>(
  model: string,
  maxTokens: number,
  parent: Context | undefined,
  fn: (span: Span, headers: Record<string, string>) => Promise<T>,
): Promise<T> {
  const parentContext = parent ?? context.active();
  const attributes = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": model,
    "gen_ai.request.max_tokens": maxTokens,
  };
  const span = tracer.startSpan(`chat ${model}`, { kind: SpanKind.CLIENT, attributes }, parentContext);
  const active = trace.setSpan(parentContext, span);
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
