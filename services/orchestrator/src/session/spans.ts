// The session's spans and its step records: one trace per session (its id derived from the
// session id), each run an "invoke_agent" span, each policy call and tool call a child span, and
// each step's JSONL record carrying the traceparent of the span it happened in.
import { randomUUID } from "node:crypto";
import {
  type Context,
  isSpanContextValid,
  type Link,
  context as otelContext,
  ROOT_CONTEXT,
  type Span,
  trace,
  TraceFlags,
} from "@opentelemetry/api";
import { deadlineOf } from "../guard/budget.js";
import { type ServedView, servedView } from "../guard/personal-data-served.js";
import type { JsonObject, SessionRecord, SessionStore, StepRecord } from "../store/session-store.js";
import type { ToolRegistry } from "../tool-registry.js";
import type { TraceSink } from "../governance/trace-sink.js";
import { cutText, MAX_SPAN_ATTRIBUTE_CHARS } from "./model-bounds.js";
import type { KeptBy, SessionSampling } from "./sampling.js";
import { sessionTraceId, traceIdOf } from "./trace-id.js";

const TRACER = "@loopguard/orchestrator";

/**
 * Span attributes whose values a model chose: bounded and redacted before any span holds them, the
 * task's own numbers masked however written (a call id may hold one in a shape no redactor knows).
 */
const MODEL_ATTRIBUTES: ReadonlySet<string> = new Set(["gen_ai.tool.call.id", "gen_ai.tool.name"]);

function spanAttributes(
  s: SessionRecord,
  attributes: Record<string, string | number>,
): Record<string, string | number> {
  let out = attributes;
  let view: ServedView | undefined;
  for (const key of MODEL_ATTRIBUTES) {
    const value = attributes[key];
    if (typeof value !== "string") continue;
    view ??= servedView(s.task);
    out = { ...out, [key]: view.text(cutText(value, MAX_SPAN_ATTRIBUTE_CHARS)) };
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

/** One run's span and why its session's trace is kept (null: dropped by head sampling). */
export interface SessionRun {
  readonly span: Span;
  readonly keptBy: KeptBy | null;
}

export interface SpanDeps {
  readonly store: Pick<SessionStore, "steps">;
  readonly traces: TraceSink;
  readonly registry: ToolRegistry;
  readonly runId: string;
  readonly now: () => number;
  /** Head sampling of session traces; without it every session's trace is kept. */
  readonly sampling?: SessionSampling;
}

/** Steps a failed session's re-recorded trace holds at most (its budget bounds them anyway). */
const MAX_RERECORDED_STEPS = 500;

export class SessionSpans {
  /** The span of each session this runner is driving, parent of its step spans. */
  readonly #contexts = new Map<string, Context>();

  constructor(private readonly deps: SpanDeps) {}

  /**
   * Opens the session's "invoke_agent" span for one run, sampled as SessionSampling decides (a
   * caller's span, when the run starts in one, is linked, not followed); `close` ends it.
   */
  open(id: string, s: SessionRecord | null): SessionRun {
    const traceId = traceIdOf(id);
    const { root, keptBy } = this.#root(s, traceId);
    const caller = trace.getActiveSpan()?.spanContext();
    const links: Link[] =
      caller && isSpanContextValid(caller) && caller.traceId !== traceId ? [{ context: caller }] : [];
    const attributes = {
      "gen_ai.operation.name": "invoke_agent",
      "loopguard.session_id": id,
      ...(keptBy ? { "loopguard.kept_by": keptBy } : {}),
    };
    const span = trace.getTracer(TRACER).startSpan("invoke_agent", { attributes, links }, root);
    this.#contexts.set(id, trace.setSpan(root, span));
    return { span, keptBy };
  }

  /** Ends the run's span; a dropped session's run that ended it in failure is recorded again (see rerecord). */
  async close(id: string, run: SessionRun, last: SessionRecord | null): Promise<void> {
    this.#contexts.delete(id);
    run.span.end();
    if (!run.keptBy && last?.state === "FAILED") await this.#rerecord(last);
  }

  /**
   * The tail half of sampling: a failed session whose trace head sampling dropped gets one after
   * all, from its stored step records — an "invoke_agent" span over its life and a span per step
   * at the step's time. Its tools' own spans stay dropped (they followed the unsampled parent).
   */
  async #rerecord(s: SessionRecord): Promise<void> {
    const steps = (await this.deps.store.steps(s.id)).slice(-MAX_RERECORDED_STEPS);
    const root = trace.setSpanContext(ROOT_CONTEXT, {
      traceId: traceIdOf(s.id),
      spanId: newSpanId(),
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
    const tracer = trace.getTracer(TRACER);
    const attributes = {
      "gen_ai.operation.name": "invoke_agent",
      "loopguard.session_id": s.id,
      "loopguard.kept_by": "error" satisfies KeptBy,
      "loopguard.state": s.state,
      "loopguard.stop_reason": s.stopReason ?? "",
    };
    const agent = tracer.startSpan("invoke_agent", { attributes, startTime: s.createdAt }, root);
    const parent = trace.setSpan(root, agent);
    for (const { step, at, payload } of steps) {
      const decision = payload.decision as JsonObject | null;
      const name = typeof decision?.name === "string" ? decision.name : undefined;
      const durationMs = typeof payload.duration_ms === "number" ? payload.duration_ms : 0;
      const stepAttributes = spanAttributes(s, {
        "loopguard.step": step,
        "loopguard.state_before": String(payload.state_before ?? ""),
        "loopguard.state_after": String(payload.state_after ?? ""),
        ...(name ? { "gen_ai.tool.name": name } : {}),
      });
      tracer.startSpan(`step ${step}`, { attributes: stepAttributes, startTime: at - durationMs }, parent).end(at);
    }
    agent.end(Math.max(s.updatedAt, s.createdAt));
  }

  /**
   * Runs `fn` in a child span of the session's, carrying its budget left. Outside a run (a human's
   * approval acted on in the API's handler) the span still joins the session's trace, sampled as
   * its runs are.
   */
  span<T>(
    s: SessionRecord,
    name: string,
    attributes: Record<string, string | number>,
    fn: (span: Span) => Promise<T>,
  ): Promise<T> {
    const parent = this.#contexts.get(s.id) ?? this.#root(s, sessionTraceId(s)).root;
    const span = trace.getTracer(TRACER).startSpan(
      name,
      {
        attributes: {
          "loopguard.session_id": s.id,
          "loopguard.state": s.state,
          "loopguard.budget.steps_left": s.budget.maxSteps - s.usage.steps,
          "loopguard.budget.tool_calls_left": s.budget.maxToolCalls - s.usage.toolCalls,
          "loopguard.budget.ms_left": Math.max(0, deadlineOf(s.usage, s.budget) - this.deps.now()),
          ...spanAttributes(s, attributes),
        },
      },
      parent,
    );
    return otelContext.with(trace.setSpan(parent, span), () => fn(span)).finally(() => span.end());
  }

  /** The made-up parent of the session's spans in trace `traceId`, flagged as its sampling decides. */
  #root(s: SessionRecord | null, traceId: string): { root: Context; keptBy: KeptBy | null } {
    const keptBy = this.deps.sampling ? this.deps.sampling.keep(s, traceId) : "ratio";
    const traceFlags = keptBy ? TraceFlags.SAMPLED : TraceFlags.NONE;
    return {
      root: trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId: newSpanId(), traceFlags, isRemote: true }),
      keptBy,
    };
  }

  /** The step's trace record (redacted), to be stored with the transition that completes it. */
  step(s: SessionRecord, input: StepInput): StepRecord {
    const traceId = sessionTraceId(s);
    // The active span may be a caller's (a run started inside StartSession): only one of this trace is the step's.
    const active = trace.getActiveSpan()?.spanContext();
    const own =
      active?.traceId === traceId ? active : trace.getSpan(this.#contexts.get(s.id) ?? ROOT_CONTEXT)?.spanContext();
    const spanId = own?.spanId ?? newSpanId();
    // The record's traceparent says whether the span it names was kept.
    const flags = own && (own.traceFlags & TraceFlags.SAMPLED) === 0 ? "00" : "01";
    const name = input.decision.name;
    return this.deps.traces.step(
      {
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
        traceparent: `00-${traceId}-${spanId}-${flags}`,
        duration_ms: Math.round(input.durationMs * 1000) / 1000,
        at: new Date(this.deps.now()).toISOString(),
        ...(input.context ? { context: input.context } : {}),
      },
      s.task,
    );
  }
}
