// Trace context for tool calls: W3C traceparent extracted from (and injected into) gRPC
// metadata. Spans go to whatever tracer provider instrumentation.ts registered; without one,
// the incoming trace id is still carried into logs.
import { randomUUID } from "node:crypto";
import {
  type Context,
  context,
  isSpanContextValid,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  type TextMapGetter,
  type TextMapSetter,
  trace,
} from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import type { Metadata } from "@grpc/grpc-js";

const propagator = new W3CTraceContextPropagator();

const metadataGetter: TextMapGetter<Metadata> = {
  keys: (carrier) => Object.keys(carrier.getMap()),
  get: (carrier, key) => {
    const values = carrier.get(key);
    return values.length === 0 ? undefined : values.map(String);
  },
};

const metadataSetter: TextMapSetter<Metadata> = {
  set: (carrier, key, value) => carrier.set(key, value),
};

export const tracer = trace.getTracer("@loopguard/tool-sdk");

function extractContext(metadata: Metadata): Context {
  return propagator.extract(ROOT_CONTEXT, metadata, metadataGetter);
}

export function injectContext(ctx: Context, metadata: Metadata): void {
  propagator.inject(ctx, metadata, metadataSetter);
}

export interface ServerSpan {
  readonly span: Span;
  readonly context: Context;
  readonly traceId: string;
}

export function startServerSpan(name: string, metadata: Metadata, attributes: Record<string, string>): ServerSpan {
  const parent = extractContext(metadata);
  const span = tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent);
  const own = span.spanContext();
  // For a call that carries no trace, its log lines still get a trace id; randomUUID for its
  // cached entropy pool (docs/performance.md, "Random ids").
  const traceId = isSpanContextValid(own)
    ? own.traceId
    : (trace.getSpanContext(parent)?.traceId ?? randomUUID().replaceAll("-", ""));
  return { span, context: trace.setSpan(parent, span), traceId };
}

export { context };
