// The session's spans and its step records: one trace per session (its id derived from the
// session id), each run an "invoke_agent" span, each policy call and tool call a child span, and
// each step's JSONL record carrying the traceparent of the span it happened in.
import { randomUUID } from "node:crypto";
import { type Context, context as otelContext, ROOT_CONTEXT, type Span, trace, TraceFlags } from "@opentelemetry/api";
import { redactText } from "@loopguard/tool-sdk";
import { deadlineOf } from "../budget.js";
import type { JsonObject, SessionRecord, StepRecord } from "../session-store.js";
import type { ToolRegistry } from "../tool-registry.js";
import type { TraceSink } from "../trace-sink.js";
import { cutText, MAX_SPAN_ATTRIBUTE_CHARS } from "./model-bounds.js";
import { sessionTraceId, traceIdOf } from "./trace-id.js";

const TRACER = "@loopguard/orchestrator";

/** Span attributes whose values a model chose: bounded and redacted before any span holds them. */
const MODEL_ATTRIBUTES: ReadonlySet<string> = new Set(["gen_ai.tool.call.id", "gen_ai.tool.name"]);

function spanAttributes(attributes: Record<string, string | number>): Record<string, string | number> {
  let out = attributes;
  for (const key of MODEL_ATTRIBUTES) {
    const value = attributes[key];
    if (typeof value === "string") out = { ...out, [key]: redactText(cutText(value, MAX_SPAN_ATTRIBUTE_CHARS)) };
  }
  return out;
}

/** 16 hex digits from randomUUID, which draws from a cached entropy pool (randomBytes costs ~10x per call). */
function newSpanId(): string {
  return randomUUID().replaceAll("-", "").slice(0, 16);
}

/** One step's record, before the run, session and trace fields are added. */
export interface StepInput {
  readonly step: number;
  readonly before: string;
  readonly after: string;
  readonly decision: JsonObject;
  readonly result?: JsonObject | null;
  readonly fingerprint?: string | null;
  readonly promptHash?: string | null;
  readonly durationMs: number;
  readonly attempt?: number;
  readonly context?: JsonObject;
}

export interface SpanDeps {
  readonly traces: TraceSink;
  readonly registry: ToolRegistry;
  readonly runId: string;
  readonly now: () => number;
}

export class SessionSpans {
  /** The span of each session this runner is driving, parent of its step spans. */
  readonly #contexts = new Map<string, Context>();

  constructor(private readonly deps: SpanDeps) {}

  /** Opens the session's "invoke_agent" span for one run; `close` ends it. */
  open(id: string): Span {
    const root = trace.setSpanContext(ROOT_CONTEXT, { traceId: traceIdOf(id), spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED, isRemote: true });
    const span = trace.getTracer(TRACER).startSpan("invoke_agent", { attributes: { "gen_ai.operation.name": "invoke_agent", "loopguard.session_id": id } }, root);
    this.#contexts.set(id, trace.setSpan(root, span));
    return span;
  }

  close(id: string, span: Span): void {
    this.#contexts.delete(id);
    span.end();
  }

  /** Runs `fn` in a child span of the session's, carrying its budget left. */
  span<T>(s: SessionRecord, name: string, attributes: Record<string, string | number>, fn: (span: Span) => Promise<T>): Promise<T> {
    const parent = this.#contexts.get(s.id) ?? ROOT_CONTEXT;
    const span = trace.getTracer(TRACER).startSpan(
      name,
      {
        attributes: {
          "loopguard.session_id": s.id,
          "loopguard.state": s.state,
          "loopguard.budget.steps_left": s.budget.maxSteps - s.usage.steps,
          "loopguard.budget.tool_calls_left": s.budget.maxToolCalls - s.usage.toolCalls,
          "loopguard.budget.ms_left": Math.max(0, deadlineOf(s.usage, s.budget) - this.deps.now()),
          ...spanAttributes(attributes),
        },
      },
      parent,
    );
    return otelContext.with(trace.setSpan(parent, span), () => fn(span)).finally(() => span.end());
  }

  /** The step's trace record (redacted), to be stored with the transition that completes it. */
  step(s: SessionRecord, input: StepInput): StepRecord {
    const traceId = sessionTraceId(s);
    const spanId = trace.getActiveSpan()?.spanContext().spanId ?? trace.getSpan(this.#contexts.get(s.id) ?? ROOT_CONTEXT)?.spanContext().spanId ?? newSpanId();
    const name = input.decision.name;
    return this.deps.traces.step({
      run_id: this.deps.runId,
      session_id: s.id,
      step: input.step,
      state_before: input.before,
      state_after: input.after,
      decision: input.decision,
      result: input.result ?? null,
      budget_before: { ...s.usage, limits: { ...s.budget } },
      fingerprint: input.fingerprint ?? null,
      prompt_hash: input.promptHash ?? null,
      tool_version: typeof name === "string" ? (this.deps.registry.get(name)?.service.file.name ?? null) : null,
      attempt: input.attempt ?? 1,
      trace_id: traceId,
      traceparent: `00-${traceId}-${spanId}-01`,
      duration_ms: Math.round(input.durationMs * 1000) / 1000,
      at: new Date(this.deps.now()).toISOString(),
      ...(input.context ? { context: input.context } : {}),
    });
  }
}
