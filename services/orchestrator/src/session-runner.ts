// Drives one session through its state machine. The policy only decides; everything else —
// parsing, validation, authorisation, preconditions, approvals, the tool call, observing,
// budgets and stopping — happens here, and every move is a persisted transition (state +
// version, with its audit row) so a session survives the process that ran it.
import { createHash, randomUUID } from "node:crypto";
import { type DescService, fromJson, toJson } from "@bufbuild/protobuf";
import { CALLER_ERROR_CODES, Effect, status, ToolCallError, type ToolClient, type ToolResult } from "@loopguard/tool-sdk";
import { type Context, context as otelContext, ROOT_CONTEXT, type Span, SpanStatusCode, trace, TraceFlags } from "@opentelemetry/api";
import { type ApprovalRules, approvalReason, newApproval, type PendingApproval } from "./approvals.js";
import { deadlineOf, refuseStep, refuseToolCall } from "./budget.js";
import { type ContextLimits, DEFAULT_CONTEXT_LIMITS, governContext } from "./context-governance.js";
import { itemJson } from "./history-json.js";
import type { Decision, HistoryItem, Policy, ResultEnvelope, ToolCallRequest } from "./policy.js";
import { fingerprint, isStuck, NO_PROGRESS_WINDOW, sha256 } from "./progress.js";
import { redact, redactText } from "./redact.js";
import { isTerminal, type SessionState, type StopReason } from "./session-state.js";
import {
  type AuditInput,
  type JsonObject,
  type JsonValue,
  LeaseLostError,
  type SessionPatch,
  type SessionRecord,
  type SessionStore,
  StaleTransitionError,
  type StepRecord,
  type Usage,
} from "./session-store.js";
import { parseToolArguments } from "./tool-arguments.js";
import type { RegisteredTool, ToolRegistry } from "./tool-registry.js";
import type { ToolTokens } from "./tool-tokens.js";
import type { TraceSink } from "./trace-sink.js";

export interface SessionContext extends JsonObject {
  history: HistoryItem[] & JsonValue[];
  fingerprints: string[];
  traceId: string;
  traceSteps: number;
}

interface PendingCall extends JsonObject {
  id: string;
  tool: string;
  arguments: string;
  argsHash: string;
  worldVersion: string;
}

interface Pending extends JsonObject {
  queue: (ToolCallRequest & JsonObject)[];
}

/** A state a persisted transition passes through, with what its audit row says. */
interface Via {
  readonly state: SessionState;
  readonly audit: Omit<AuditInput, "at">;
}

const STARTED: Via = { state: "THINKING", audit: { reason: "session started" } };

/** The states a move from `s` to `to` passes first: from IDLE, THINKING (the session's start). */
function startOf(s: SessionRecord, to: SessionState): readonly Via[] {
  return s.state === "IDLE" && to !== "THINKING" ? [STARTED] : [];
}

/** What the host does with one tool call the policy asked for, decided before anything is written. */
type CallPlan =
  | { readonly kind: "observe"; readonly envelope: ResultEnvelope; readonly reason: string }
  | { readonly kind: "stop"; readonly reason: StopReason; readonly answer: string }
  | { readonly kind: "approve"; readonly tool: RegisteredTool; readonly call: PendingCall; readonly context: JsonObject; readonly why: string }
  | { readonly kind: "start"; readonly tool: RegisteredTool; readonly call: PendingCall; readonly context: JsonObject };

export interface RunnerDeps {
  readonly store: SessionStore;
  readonly registry: ToolRegistry;
  /** Clients by the contract's tool name ("kb-search", "billing", "risk"). */
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  readonly policies: ReadonlyMap<string, Policy>;
  readonly traces: TraceSink;
  /** Per-call tool credentials: this session, this method's scope, this call's deadline. */
  readonly tokens: ToolTokens;
  readonly approvals: ApprovalRules;
  /** Lease owner (this replica); every transition is fenced by it. */
  readonly owner: string;
  readonly runId: string;
  readonly now: () => number;
  readonly context?: ContextLimits;
  /** Raised when a session's history reaches 80% of the model's window. */
  readonly onContextAlarm?: (session: SessionRecord, tokens: number) => void;
  readonly onTransition?: (to: SessionState) => void;
  readonly onStopped?: (session: SessionRecord) => void;
  readonly onStep?: (session: SessionRecord, tool: string, envelope: ResultEnvelope) => void;
}

export function traceIdOf(sessionId: string): string {
  return createHash("sha256").update(sessionId).digest("hex").slice(0, 32);
}

/** Terminal state for a stop reason. */
export function terminalStateOf(reason: StopReason): SessionState {
  return reason === "done" ? "DONE" : reason === "cancelled" ? "CANCELLED" : "FAILED";
}

/** The session's trace id: the one its context keeps, else the one derived from its id. */
function sessionTraceId(s: SessionRecord): string {
  return (s.context as Partial<SessionContext>).traceId ?? traceIdOf(s.id);
}

function contextOf(s: SessionRecord): SessionContext {
  const c = s.context as Partial<SessionContext>;
  return {
    ...s.context,
    history: (c.history ?? []) as SessionContext["history"],
    fingerprints: c.fingerprints ?? [],
    traceId: sessionTraceId(s),
    traceSteps: c.traceSteps ?? 0,
  };
}

function pendingOf(s: SessionRecord): Pending & { call?: PendingCall; approval?: PendingApproval; envelope?: ResultEnvelope & JsonObject; approvedBy?: string; confidence?: number } {
  return { queue: [], ...(s.pending ?? {}) } as never;
}

/** 16 hex digits from randomUUID, which draws from a cached entropy pool (randomBytes costs ~10x per call). */
function newSpanId(): string {
  return randomUUID().replaceAll("-", "").slice(0, 16);
}

function argsHash(tool: string, args: string): string {
  return sha256(`${tool}\n${args}`).slice(0, 32);
}

/** An observation the host makes itself; its message may quote the model's arguments, so it is redacted. */
function errorEnvelope(code: string, message: string, suggestedAction: string, now: number, retryable = false): ResultEnvelope {
  return { ok: false, error: { code, message: redactText(message), retryable, suggestedAction }, refs: [], costMicros: 0, servedFrom: "none", observedAt: new Date(now).toISOString() };
}

/** World references a result depends on, for citations, approvals and progress fingerprints. */
function refsOf(tool: RegisteredTool, data: JsonValue): string[] {
  const d = data as JsonObject;
  if (tool.tool === "kb-search" && Array.isArray(d.hits)) {
    return (d.hits as JsonObject[]).map((h) => `kb:${String(h.docId)}@${String(h.version ?? 1)}`);
  }
  const order = d.order as JsonObject | undefined;
  if (order) return [`order:${String(order.orderId)}@${String(order.version ?? "0")}`];
  const refund = d.refund as JsonObject | undefined;
  if (refund) return [`refund:${String(refund.refundId)}`, `order:${String(refund.orderId)}`];
  return [];
}

/** The irreversible side effects a session has observed succeed, by their world references (e.g. "refund:rf_…"). */
export function sideEffectsOf(s: SessionRecord, registry: ToolRegistry): string[] {
  const history = ((s.context as Partial<SessionContext>).history ?? []) as HistoryItem[];
  return history.flatMap((item) =>
    item.kind === "observation" && item.envelope.ok && registry.get(item.tool)?.effect === Effect.IRREVERSIBLE_EXTERNAL ? [`${item.tool} ${item.envelope.refs.join(" ")}`] : [],
  );
}

/** Time a re-issue of an unclear call needs left on the session's clock, beyond its wait. */
const REISSUE_MIN_LEFT_MS = 1000;

/** Waits before re-issuing an unclear call the n-th time: 250 ms doubling to 2 s. */
function reissueWaitMs(reissues: number): number {
  return Math.min(2000, 250 * 2 ** reissues);
}

const SUGGESTIONS: Partial<Record<number, string>> = {
  [status.INVALID_ARGUMENT]: "fix the arguments named in the error and call again",
  [status.NOT_FOUND]: "check the identifiers; do not retry the same call",
  [status.FAILED_PRECONDITION]: "the world does not allow this action now; explain that in the answer",
  [status.ALREADY_EXISTS]: "the action was already done with other parameters; do not repeat it",
  [status.UNAVAILABLE]: "the tool is unavailable; answer with what is known or try later",
  [status.DEADLINE_EXCEEDED]: "the tool did not answer in time; answer with what is known",
  [status.RESOURCE_EXHAUSTED]: "the tool is overloaded; try later",
};

export class SessionRunner {
  /** The span of each session this runner is driving, parent of its step spans. */
  readonly #sessionContexts = new Map<string, Context>();

  constructor(private readonly deps: RunnerDeps) {}

  /**
   * Runs the session until it ends, waits for a human, or this replica loses its lease.
   * `current` is the record as the caller just read or created it (saves reading it again).
   * Returns the last record seen.
   */
  async run(id: string, signal: AbortSignal, current?: SessionRecord): Promise<SessionRecord | null> {
    // One trace per session, whatever replica or restart drives it: its id is derived from the
    // session id, and each run of the session is an "invoke_agent" span in it.
    const root = trace.setSpanContext(ROOT_CONTEXT, { traceId: traceIdOf(id), spanId: newSpanId(), traceFlags: TraceFlags.SAMPLED, isRemote: true });
    const span = trace.getTracer("@loopguard/orchestrator").startSpan("invoke_agent", { attributes: { "gen_ai.operation.name": "invoke_agent", "loopguard.session_id": id } }, root);
    this.#sessionContexts.set(id, trace.setSpan(root, span));
    try {
      const last = await this.#run(id, current ?? (await this.deps.store.get(id)), signal);
      if (last) span.setAttributes({ "loopguard.state": last.state, "loopguard.stop_reason": last.stopReason ?? "" });
      return last;
    } finally {
      this.#sessionContexts.delete(id);
      span.end();
    }
  }

  async #run(id: string, first: SessionRecord | null, signal: AbortSignal): Promise<SessionRecord | null> {
    let s = first;
    while (s && !isTerminal(s.state) && !signal.aborted) {
      if (s.state === "AWAITING_APPROVAL") return s;
      try {
        s = await this.#advance(s, signal);
      } catch (error) {
        if (error instanceof LeaseLostError) return null;
        if (!(error instanceof StaleTransitionError)) throw error;
        s = await this.deps.store.get(id);
      }
    }
    return s;
  }

  async #advance(s: SessionRecord, signal: AbortSignal): Promise<SessionRecord> {
    switch (s.state) {
      // A new session's first decision is stored with its start (see #move): one commit, not two.
      case "IDLE":
      case "THINKING":
        return this.#think(s, signal);
      case "TOOL_EXECUTING":
      case "RETRYING":
        return this.#execute(s, signal);
      case "FALLBACK":
        return this.#move(s, "OBSERVING", { reason: "fallback answer observed" });
      case "OBSERVING":
        return this.#observe(s);
      default:
        throw new Error(`cannot advance a session in ${s.state}`);
    }
  }

  /**
   * One persisted transition: through the `via` states (each with its own audit row), to `to`.
   * `step`, when given, is stored in the same transaction. From IDLE the session passes THINKING
   * first: its first decision is made before the start is stored, and both commit together.
   */
  async #move(s: SessionRecord, to: SessionState, audit: Omit<AuditInput, "at">, patch?: Partial<SessionPatch>, step?: StepRecord, through: readonly Via[] = [], fenced = true): Promise<SessionRecord> {
    const at = this.deps.now();
    const via = [...startOf(s, to), ...through];
    const moved = await this.deps.store.transition({
      id: s.id,
      from: s.state,
      to,
      expectedVersion: s.version,
      current: s,
      audit: { ...audit, at },
      ...(fenced ? { owner: this.deps.owner } : {}),
      ...(via.length > 0 ? { via: via.map((v) => ({ state: v.state, audit: { ...v.audit, at } })) } : {}),
      ...(patch ? { patch } : {}),
      ...(step ? { step } : {}),
    });
    for (const v of via) this.deps.onTransition?.(v.state);
    this.deps.onTransition?.(to);
    if (step) await this.deps.traces.append(step);
    return moved;
  }

  /**
   * A move made for someone outside the loop (a human's approval): the same persisted
   * transition, audit row and metrics as the runner's own moves. Unfenced by a lease: the caller
   * holds none, and the optimistic lock on (state, version) orders it against the runner.
   */
  move(s: SessionRecord, to: SessionState, audit: Omit<AuditInput, "at">, patch?: Partial<SessionPatch>): Promise<SessionRecord> {
    return this.#move(s, to, audit, patch, undefined, [], false);
  }

  async stop(s: SessionRecord, reason: StopReason, answer: string, patch: Partial<SessionPatch> = {}, step?: StepRecord, via: readonly Via[] = [], fenced = true): Promise<SessionRecord> {
    const clean = redactText(answer);
    const done = await this.#move(
      s,
      terminalStateOf(reason),
      { reason: `${reason}: ${clean.slice(0, 300)}`, outcome: reason },
      { ...patch, stopReason: reason, answer: clean, pending: null },
      step,
      via,
      fenced,
    );
    this.deps.onStopped?.(done);
    return done;
  }

  #span<T>(s: SessionRecord, name: string, attributes: Record<string, string | number>, fn: (span: Span, ctx: Context) => Promise<T>): Promise<T> {
    const parent = this.#sessionContexts.get(s.id) ?? ROOT_CONTEXT;
    const tracer = trace.getTracer("@loopguard/orchestrator");
    const span = tracer.startSpan(
      name,
      {
        attributes: {
          "loopguard.session_id": s.id,
          "loopguard.state": s.state,
          "loopguard.budget.steps_left": s.budget.maxSteps - s.usage.steps,
          "loopguard.budget.tool_calls_left": s.budget.maxToolCalls - s.usage.toolCalls,
          "loopguard.budget.ms_left": Math.max(0, deadlineOf(s.usage, s.budget) - this.deps.now()),
          ...attributes,
        },
      },
      parent,
    );
    const ctx = trace.setSpan(parent, span);
    return otelContext.with(ctx, () => fn(span, ctx)).finally(() => span.end());
  }

  async #think(s: SessionRecord, signal: AbortSignal): Promise<SessionRecord> {
    const pending = pendingOf(s);
    const next = pending.queue[0];
    if (next) return this.#prepareCall(s, next, pending.queue.slice(1), pending.confidence as number | undefined, signal);
    const now = this.deps.now();
    const refused = refuseStep(s.usage, s.budget, now);
    if (refused) return this.stop(s, refused, `stopped before step ${s.usage.steps + 1}: ${refused.replace(/_/g, " ")} reached`);
    const policy = this.deps.policies.get(s.policy);
    if (!policy) return this.stop(s, "unrecoverable_error", `unknown policy "${s.policy}"`);
    const ctx = contextOf(s);
    const started = performance.now();
    let decision: Decision;
    try {
      decision = await this.#span(s, "policy.decide", { "gen_ai.operation.name": "chat", "loopguard.policy": policy.name }, () =>
        policy.decide({ goal: s.goal, task: s.task, tools: this.deps.registry.specs(s.scopes), history: ctx.history, step: s.usage.steps + 1 }, signal),
      );
    } catch (error) {
      const retryable = (error as { retryable?: boolean }).retryable === true;
      if (retryable && deadlineOf(s.usage, s.budget) > this.deps.now() + 1000) {
        await new Promise((resolve) => setTimeout(resolve, Math.min(Number((error as { retryAfterMs?: number }).retryAfterMs ?? 500), 5000)));
        return s;
      }
      return this.stop(s, "unrecoverable_error", `the policy failed: ${redactText((error as Error).message)}`);
    }
    const usage: Usage = { ...s.usage, steps: s.usage.steps + 1, tokens: s.usage.tokens + decision.usage.input + decision.usage.output };
    const step = ctx.traceSteps + 1;
    const traceCtx = { ...ctx, traceSteps: step };
    if (decision.kind === "final") {
      const problem = this.#checkAnswer(decision.answer, ctx.history);
      const record = this.#step(s, step, s.state, problem ? "THINKING" : "DONE", { kind: "final", answer: decision.answer, accepted: !problem, why: problem ?? "" }, null, null, decision.promptHash, performance.now() - started);
      if (problem) {
        const history = [...ctx.history, { kind: "rejected_answer", text: redactText(decision.answer), why: problem } as HistoryItem];
        return this.#move(s, "THINKING", { reason: "answer rejected by the host", outcome: problem }, { usage, context: { ...traceCtx, history } as JsonObject }, record);
      }
      return this.stop(s, "done", decision.answer, { usage, context: traceCtx as JsonObject }, record);
    }
    const queue = decision.calls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments }));
    // The usual case — the first call can start right away — is one transition, THINKING ->
    // TOOL_EXECUTING, carrying the decision's step; anything else stores the decision first.
    const decided: SessionRecord = { ...s, usage, context: traceCtx as JsonObject };
    const plan = queue[0] ? this.#planCall(decided, queue[0], decision.confidence) : undefined;
    const startsAt = plan?.kind === "start" ? "TOOL_EXECUTING" : "THINKING";
    const record = this.#step(s, step, s.state, startsAt, { kind: "tool_calls", calls: queue }, null, null, decision.promptHash, performance.now() - started);
    if (plan?.kind === "start") {
      return this.#startCall(decided, plan.tool, plan.call, queue.slice(1), plan.context, signal, record, `policy asked for ${queue.length} tool call(s); calling ${plan.tool.name}`);
    }
    return this.#move(
      s,
      "THINKING",
      { reason: `policy asked for ${queue.length} tool call(s)` },
      {
        usage,
        context: traceCtx as JsonObject,
        pending: { queue, ...(decision.confidence !== undefined ? { confidence: decision.confidence } : {}) } as JsonObject,
      },
      record,
    );
  }

  /** The host checks a final answer: every refund id and document it cites must have been observed. */
  #checkAnswer(answer: string, history: readonly HistoryItem[]): string | undefined {
    if (answer.trim().length === 0) return "the answer is empty";
    const observed = history.filter((h) => h.kind === "observation").map(itemJson).join(",");
    for (const refundId of answer.match(/rf_[A-Za-z0-9]{16}/g) ?? []) {
      if (!observed.includes(refundId)) return `the answer cites refund ${refundId}, which no tool returned`;
    }
    for (const doc of answer.match(/\[([a-z0-9-]+)@(\d+)\]/g) ?? []) {
      const [, id, version] = /\[([a-z0-9-]+)@(\d+)\]/.exec(doc)!;
      if (!observed.includes(`kb:${id}@${version}`)) return `the answer cites ${id}@${version}, which no search returned`;
    }
    return undefined;
  }

  /** Records an observation that needed no tool call (EINVAL, ENOTOOL …) and goes on thinking. */
  async #observeInPlace(s: SessionRecord, call: ToolCallRequest, rest: Pending["queue"], envelope: ResultEnvelope, reason: string): Promise<SessionRecord> {
    const ctx = contextOf(s);
    // The model wrote the name too: an unknown tool's name is stored like its arguments.
    const name = redactText(call.name);
    const history = [
      ...ctx.history,
      { kind: "call", callId: call.id, tool: name, arguments: redactText(call.arguments) } as HistoryItem,
      { kind: "observation", callId: call.id, tool: name, envelope } as HistoryItem,
    ];
    const step = ctx.traceSteps + 1;
    const record = this.#step(s, step, s.state, s.state, { kind: "tool_call", id: call.id, name: call.name, arguments: call.arguments }, envelope as unknown as JsonObject, null, null, 0);
    return this.#move(
      s,
      "THINKING",
      { reason, tool: name, outcome: envelope.error?.code ?? "ok" },
      { context: { ...ctx, history, traceSteps: step } as JsonObject, pending: rest.length > 0 ? ({ queue: rest } as JsonObject) : null },
      record,
    );
  }

  async #prepareCall(s: SessionRecord, call: ToolCallRequest, rest: Pending["queue"], confidence: number | undefined, signal: AbortSignal): Promise<SessionRecord> {
    const plan = this.#planCall(s, call, confidence);
    switch (plan.kind) {
      case "observe":
        return this.#observeInPlace(s, call, rest, plan.envelope, plan.reason);
      case "stop":
        return this.stop(s, plan.reason, plan.answer);
      case "approve": {
        const approval = newApproval(plan.tool.name, plan.call.argsHash, plan.call.worldVersion, plan.why, this.deps.now(), this.deps.approvals);
        return this.#move(s, "AWAITING_APPROVAL", { reason: `approval needed: ${plan.why}`, tool: plan.tool.name, argsHash: plan.call.argsHash }, {
          context: plan.context,
          pending: { queue: rest, call: plan.call, approval } as unknown as JsonObject,
        });
      }
      case "start":
        return this.#startCall(s, plan.tool, plan.call, rest, plan.context, signal);
    }
  }

  /** The pipeline before a call: known tool, valid arguments, scope, budget, preconditions, approval. */
  #planCall(s: SessionRecord, call: ToolCallRequest, confidence: number | undefined): CallPlan {
    const now = this.deps.now();
    const tool = this.deps.registry.get(call.name);
    if (!tool) {
      const known = this.deps.registry.specs(s.scopes).map((t) => t.name).join(", ");
      return { kind: "observe", envelope: errorEnvelope("ENOTOOL", `no tool named "${call.name}"`, `use one of: ${known}`, now), reason: "unknown tool" };
    }
    const parsed = parseToolArguments(tool, call.arguments);
    if (!parsed.ok) {
      return { kind: "observe", envelope: errorEnvelope("EINVAL", parsed.message, "fix the arguments and call again", now), reason: "invalid arguments" };
    }
    if (tool.requiredScope && !s.scopes.includes(tool.requiredScope)) {
      return { kind: "stop", reason: "permission_denied", answer: `the session is not granted scope "${tool.requiredScope}" needed by ${tool.name}` };
    }
    const refused = refuseToolCall(s.usage, s.budget, tool.costMicros, now);
    if (refused) return { kind: "stop", reason: refused, answer: `stopped before calling ${tool.name}: ${refused.replace(/_/g, " ")} reached` };
    const args = toJson(tool.method.input, parsed.message) as JsonObject;
    const ctx = contextOf(s);
    const precondition = this.#precondition(tool, args, ctx.history);
    if (precondition) return { kind: "observe", envelope: errorEnvelope("EPRECOND", precondition, "satisfy the precondition first", now), reason: "precondition not met" };
    if (tool.idempotencyKeyField) {
      // Derived from session + call, so a re-issued call after a crash carries the same key.
      args[tool.idempotencyKeyField] = `lg-${sha256(`${s.id}:${call.id}:${ctx.traceSteps}`).slice(0, 40)}`;
    }
    const argumentsJson = JSON.stringify(args);
    const hash = argsHash(tool.name, argumentsJson);
    const worldVersion = this.#worldVersion(args, ctx.history);
    const pendingCall: PendingCall = { id: call.id, tool: tool.name, arguments: argumentsJson, argsHash: hash, worldVersion };
    const history = [...ctx.history, { kind: "call", callId: call.id, tool: tool.name, arguments: JSON.stringify(redact(args)) } as HistoryItem];
    const context = { ...ctx, history } as JsonObject;
    const why = approvalReason(tool, args, ctx.history, confidence, this.deps.approvals);
    if (why) return { kind: "approve", tool, call: pendingCall, context, why };
    return { kind: "start", tool, call: pendingCall, context };
  }

  /**
   * Records TOOL_EXECUTING, then makes the call. A read-only call goes out while that record is
   * being committed instead of after: re-issuing it is always safe, so a crash before the commit
   * (the session resumes THINKING and decides again) loses nothing, and a step waits for one
   * commit less. Every other call waits for its record, so an interrupted one is known.
   */
  #startCall(s: SessionRecord, tool: RegisteredTool, call: PendingCall, rest: Pending["queue"], context: JsonObject, signal: AbortSignal, step?: StepRecord, reason = `calling ${tool.name}`): Promise<SessionRecord> {
    const patch = {
      context,
      usage: { ...s.usage, toolCalls: s.usage.toolCalls + 1 },
      pending: { queue: rest, call, startedBy: this.deps.runId } as JsonObject,
    };
    const recorded = this.#move(s, "TOOL_EXECUTING", { reason, tool: tool.name, argsHash: call.argsHash, expectedTimeoutMs: tool.timeoutMs }, patch, step);
    if (tool.effect !== Effect.READ_ONLY) return recorded;
    // Awaited by #execute before its first write; this only keeps a failure from going unhandled
    // if the call itself throws first.
    recorded.catch(() => undefined);
    // One version per state the move passes, as #move records it.
    return this.#execute({ ...s, ...patch, state: "TOOL_EXECUTING", version: s.version + 1 + startOf(s, "TOOL_EXECUTING").length }, signal, recorded);
  }

  /** Rules the contract cannot express: a refund needs an observed paid order with enough refundable. */
  #precondition(tool: RegisteredTool, args: JsonObject, history: readonly HistoryItem[]): string | undefined {
    if (tool.name !== "billing_refund") return undefined;
    const order = this.#observedOrder(history, String(args.orderId));
    if (!order) return `look the order up with billing_get_order before refunding it`;
    if (order.status !== "ORDER_STATUS_PAID") return `order ${String(args.orderId)} is ${String(order.status)}, not paid`;
    if (Number(args.amountCents) > Number(order.refundableCents ?? 0)) {
      return `amount ${String(args.amountCents)} exceeds the refundable ${String(order.refundableCents ?? 0)} cents`;
    }
    return undefined;
  }

  #observedOrder(history: readonly HistoryItem[], orderId: string): JsonObject | undefined {
    for (let i = history.length - 1; i >= 0; i -= 1) {
      const item = history[i]!;
      if (item.kind !== "observation" || item.tool !== "billing_get_order" || !item.envelope.ok) continue;
      const order = (item.envelope.data as JsonObject | undefined)?.order as JsonObject | undefined;
      if (order?.orderId === orderId) return order;
    }
    return undefined;
  }

  #worldVersion(args: JsonObject, history: readonly HistoryItem[]): string {
    if (typeof args.orderId !== "string") return "";
    const order = this.#observedOrder(history, args.orderId);
    return order ? `order:${args.orderId}@${String(order.version ?? "0")}` : "";
  }

  /**
   * Makes the pending call and observes its answer. `recorded`, when given, is the commit of this
   * TOOL_EXECUTING record still in flight (`s` is what it will be); it settles before any write.
   */
  async #execute(s: SessionRecord, signal: AbortSignal, recorded?: Promise<SessionRecord>): Promise<SessionRecord> {
    const pending = pendingOf(s);
    const call = pending.call;
    if (!call) return this.stop(s, "unrecoverable_error", "a tool call was in flight but its record is missing");
    const tool = this.deps.registry.get(call.tool)!;
    const now = this.deps.now();
    // "approval": a human approved this call just now, so it is a first attempt, not an interrupted one.
    if (pending.startedBy !== this.deps.runId && pending.startedBy !== "approval") {
      // This call was interrupted (its process died). Re-issue it only when that is safe.
      const safe = tool.effect === Effect.READ_ONLY || tool.effect === Effect.IDEMPOTENT_WRITE || (tool.idempotencyKeyField !== undefined && call.arguments.includes(tool.idempotencyKeyField));
      if (!safe) {
        const approval = newApproval(tool.name, call.argsHash, call.worldVersion, "an interrupted call of a non-idempotent tool may or may not have taken effect", now, this.deps.approvals);
        return this.#move(s, "AWAITING_APPROVAL", { reason: "interrupted non-idempotent call needs a human", tool: tool.name, argsHash: call.argsHash }, {
          pending: { ...pending, approval, startedBy: "" } as unknown as JsonObject,
        });
      }
      if (s.state === "RETRYING") s = await this.#move(s, "TOOL_EXECUTING", { reason: "re-issuing an interrupted call", tool: tool.name, argsHash: call.argsHash });
      s = await this.deps.store.transition({
        id: s.id, from: s.state, to: s.state === "TOOL_EXECUTING" ? "RETRYING" : "TOOL_EXECUTING", expectedVersion: s.version, current: s,
        audit: { at: now, reason: "re-issuing an interrupted call (safe: read-only or same idempotency key)", tool: tool.name, argsHash: call.argsHash }, owner: this.deps.owner,
        patch: { pending: { ...pending, startedBy: this.deps.runId } as JsonObject },
      });
      return s;
    }
    if (s.state === "RETRYING") return this.#move(s, "TOOL_EXECUTING", { reason: "retrying", tool: tool.name, argsHash: call.argsHash });
    if (pending.approvedBy && call.worldVersion && !pending.reissues) {
      const current = await this.#currentWorldVersion(s, call);
      if (current !== undefined && current !== call.worldVersion) {
        const envelope = errorEnvelope("EAPPROVAL", `the world changed since approval (${call.worldVersion} → ${current}); look again and ask for a new approval`, "look the order up again", now);
        return this.#move(s, "OBSERVING", { reason: "approval no longer matches the world", tool: tool.name, outcome: "EAPPROVAL" }, {
          pending: { ...pending, envelope } as unknown as JsonObject,
        });
      }
    }
    let state = s;
    let unsettled = recorded;
    const settle = async () => {
      if (unsettled) state = await unsettled;
      unsettled = undefined;
    };
    const client = this.deps.clients.get(tool.tool);
    if (!client) {
      await settle();
      return this.stop(state, "unrecoverable_error", `no client for tool ${tool.tool}`);
    }
    const deadline = Math.min(now + tool.timeoutMs, deadlineOf(s.usage, s.budget));
    const token = await this.deps.tokens.for(s.id, tool, deadline);
    const started = performance.now();
    const outcome = await this.#span(s, `execute_tool ${tool.name}`, { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool.name, "gen_ai.tool.call.id": call.id }, async (span) => {
      try {
        const request = fromJson(tool.method.input, JSON.parse(call.arguments) as JsonValue);
        const result = await client.call(tool.method.localName as never, request as never, {
          deadline: new Date(deadline),
          token,
          signal,
          onRetry: async () => {
            await settle();
            state = await this.#move(state, "RETRYING", { reason: "retryable failure", tool: tool.name, argsHash: call.argsHash });
            state = await this.#move(state, "TOOL_EXECUTING", { reason: "retrying", tool: tool.name, argsHash: call.argsHash });
          },
        });
        span.setAttributes({ "loopguard.served_from": result.source, "loopguard.attempts": result.attempts, "loopguard.breaker_state": client.breakerState });
        return { result } as const;
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR });
        return { error: error as ToolCallError | Error } as const;
      }
    });
    await settle();
    const observedAt = new Date(this.deps.now()).toISOString();
    if ("error" in outcome) {
      const e = outcome.error;
      if (!(e instanceof ToolCallError)) throw e;
      if (e.code === status.PERMISSION_DENIED) return this.stop(state, "permission_denied", `${tool.name} refused the session's credentials: ${e.message}`);
      if (e.code === status.UNAUTHENTICATED) return this.stop(state, "unrecoverable_error", `${tool.name} did not accept the session token`);
      // A side effect whose call failed without a definite answer (a deadline, a dropped
      // connection, a dead replica) may have been made: the host asks again with the same
      // idempotency key — the tool replays what it did or does it once — until it gets an answer
      // or the session's clock runs out. The policy never sees a failure it would re-plan under
      // a new key, nor tells a user "failed" about money that moved.
      const keyed = tool.effect !== Effect.READ_ONLY && tool.idempotencyKeyField !== undefined && call.arguments.includes(`"${tool.idempotencyKeyField}"`);
      if (keyed && !CALLER_ERROR_CODES.has(e.code)) {
        const reissues = Number(pending.reissues ?? 0);
        const waitMs = reissueWaitMs(reissues);
        if (deadlineOf(state.usage, state.budget) - this.deps.now() > waitMs + REISSUE_MIN_LEFT_MS) {
          await new Promise((resolve) => setTimeout(resolve, waitMs));
          if (signal.aborted) return state;
          return this.#move(
            state,
            "RETRYING",
            { reason: `outcome unclear (${status[e.code]}${e.reason ? ` ${e.reason}` : ""}); re-issuing with the same idempotency key`, tool: tool.name, argsHash: call.argsHash, outcome: status[e.code] ?? String(e.code) },
            { pending: { ...pending, reissues: reissues + 1 } as JsonObject },
          );
        }
        const envelope = errorEnvelope(
          "EUNCLEAR",
          `${tool.name} gave no definite answer before the session's clock ran out (last: ${status[e.code]}${e.reason ? ` ${e.reason}` : ""}, after ${reissues + 1} attempt(s) with one idempotency key); it may have been made`,
          "say the outcome is not confirmed; never make it again under another key",
          this.deps.now(),
        );
        return this.#observe(state, { ...pending, envelope: envelope as ResultEnvelope & JsonObject, attempt: e.attempts, durationMs: performance.now() - started }, [
          { state: "OBSERVING", audit: { reason: `${tool.name} outcome unclear`, tool: tool.name, argsHash: call.argsHash, outcome: "EUNCLEAR" } },
        ]);
      }
      const envelope: ResultEnvelope = {
        ok: false,
        error: { code: status[e.code] ?? String(e.code), message: `${e.reason ? `${e.reason}: ` : ""}${redactText(e.message)}`, retryable: e.retryable, suggestedAction: SUGGESTIONS[e.code] ?? "read the error and decide" },
        refs: [],
        costMicros: tool.costMicros,
        servedFrom: "none",
        observedAt,
      };
      return this.#observe(state, { ...pending, envelope: envelope as ResultEnvelope & JsonObject, attempt: e.attempts, durationMs: performance.now() - started }, [
        { state: "OBSERVING", audit: { reason: `${tool.name} failed`, tool: tool.name, argsHash: call.argsHash, outcome: envelope.error!.code } },
      ]);
    }
    const result = outcome.result as ToolResult<never>;
    const data = toJson(tool.method.output, result.response) as JsonValue;
    const envelope: ResultEnvelope = {
      ok: true,
      data,
      refs: refsOf(tool, data),
      costMicros: tool.costMicros,
      servedFrom: result.source,
      observedAt,
    };
    // The answer is observed in the same transaction that records it: a crash before that commit
    // leaves the session TOOL_EXECUTING, and the call is re-issued only if that is safe.
    const answered = { tool: tool.name, argsHash: call.argsHash, outcome: result.source };
    const via: Via[] =
      result.source === "live"
        ? [{ state: "OBSERVING", audit: { reason: `${tool.name} answered`, ...answered } }]
        : [
            { state: "FALLBACK", audit: { reason: `${tool.name} answered from ${result.source}`, ...answered } },
            { state: "OBSERVING", audit: { reason: "fallback answer observed" } },
          ];
    return this.#observe(state, { ...pending, envelope: envelope as ResultEnvelope & JsonObject, attempt: result.attempts, durationMs: result.latencyMs }, via);
  }

  async #currentWorldVersion(s: SessionRecord, call: PendingCall): Promise<string | undefined> {
    const orderId = (JSON.parse(call.arguments) as JsonObject).orderId;
    const billing = this.deps.clients.get("billing");
    const getOrder = this.deps.registry.get("billing_get_order");
    if (typeof orderId !== "string" || !billing || !getOrder) return undefined;
    const deadline = Math.min(this.deps.now() + getOrder.timeoutMs, deadlineOf(s.usage, s.budget));
    const token = await this.deps.tokens.for(s.id, getOrder, deadline);
    const result = await billing.call("getOrder" as never, { orderId } as never, { token, deadline: new Date(deadline) }).catch(() => undefined);
    const order = (result?.response as { order?: { version: bigint } } | undefined)?.order;
    return order ? `order:${orderId}@${String(order.version)}` : undefined;
  }

  /**
   * Appends the observation to the history and moves on to THINKING (or stops on no progress).
   * `s` is OBSERVING with the result in `pending`, or is still TOOL_EXECUTING and passes `via`
   * OBSERVING in the same transition.
   */
  async #observe(s: SessionRecord, pending: ReturnType<typeof pendingOf> = pendingOf(s), via: readonly Via[] = []): Promise<SessionRecord> {
    const call = pending.call;
    const envelope = pending.envelope;
    if (!call || !envelope) return this.stop(s, "unrecoverable_error", "an observation was expected but none was recorded");
    const ctx = contextOf(s);
    const clean = redact(envelope as unknown as JsonObject) as unknown as ResultEnvelope;
    const governed = governContext(
      [...ctx.history, { kind: "observation", callId: call.id, tool: call.tool, envelope: clean, latencyMs: Math.round(Number(pending.durationMs ?? 0)) } as HistoryItem],
      this.deps.context ?? DEFAULT_CONTEXT_LIMITS,
    );
    const history = governed.history;
    if (governed.alarm) this.deps.onContextAlarm?.(s, governed.tokens);
    const outcome = envelope.ok ? JSON.stringify(envelope.data ?? null) : (envelope.error?.code ?? "error");
    const print = fingerprint(call.tool, call.arguments, outcome, envelope.refs);
    const fingerprints = [...ctx.fingerprints, print].slice(-10);
    const step = ctx.traceSteps + 1;
    const usage = { ...s.usage, costMicros: s.usage.costMicros + envelope.costMicros };
    const record = this.#step(s, step, "TOOL_EXECUTING", "OBSERVING", { kind: "tool_call", id: call.id, name: call.tool, arguments: call.arguments, served_from: envelope.servedFrom }, clean as unknown as JsonObject, print, null, Number(pending.durationMs ?? 0), Number(pending.attempt ?? 1));
    const context = {
      ...ctx,
      history,
      fingerprints,
      traceSteps: step,
      contextTokens: governed.tokens,
      compressions: Number(ctx.compressions ?? 0) + governed.compressed,
    } as JsonObject;
    this.deps.onStep?.(s, call.tool, envelope);
    if (isStuck(fingerprints)) {
      return this.stop(s, "no_progress", `no progress: the same call to ${call.tool} gave the same result ${NO_PROGRESS_WINDOW} times`, { usage, context }, record, via);
    }
    return this.#move(
      s,
      "THINKING",
      { reason: `observed ${call.tool}`, tool: call.tool, outcome: envelope.ok ? "ok" : (envelope.error?.code ?? "error") },
      { usage, context, pending: pending.queue.length > 0 ? ({ queue: pending.queue } as JsonObject) : null },
      record,
      via,
    );
  }

  /** The step's trace record (redacted), to be stored with the transition that completes it. */
  #step(s: SessionRecord, step: number, before: string, after: string, decision: JsonObject, result: JsonObject | null, print: string | null, promptHash: string | null, durationMs: number, attempt = 1): StepRecord {
    // Not contextOf(s): that copies the whole context for one field.
    const traceId = sessionTraceId(s);
    const spanId =
      trace.getActiveSpan()?.spanContext().spanId ??
      trace.getSpan(this.#sessionContexts.get(s.id) ?? ROOT_CONTEXT)?.spanContext().spanId ??
      newSpanId();
    return this.deps.traces.step({
      run_id: this.deps.runId,
      session_id: s.id,
      step,
      state_before: before,
      state_after: after,
      decision,
      result,
      budget_before: { ...s.usage, limits: s.budget } as unknown as JsonObject,
      fingerprint: print,
      prompt_hash: promptHash,
      tool_version: typeof decision.name === "string" ? (this.deps.registry.get(decision.name)?.service.file.name ?? null) : null,
      attempt,
      trace_id: traceId,
      traceparent: `00-${traceId}-${spanId}-01`,
      duration_ms: Math.round(durationMs * 1000) / 1000,
      at: new Date(this.deps.now()).toISOString(),
    });
  }
}

