// Drives one session through its state machine. The policy only decides; everything else —
// parsing, validation, authorisation, preconditions, approvals, the tool call, observing,
// budgets and stopping — happens here and in this folder, and every move is a persisted
// transition made by SessionMoves, so a session survives the process that ran it.
import { Effect } from "@loopguard/tool-sdk";
import { context as otelContext, trace } from "@opentelemetry/api";
import { newApproval } from "../guard/approvals.js";
import { DEFAULT_MAX_RETRIES, deadlineOf, refuseStep, retriesLeft } from "../guard/budget.js";
import { confidenceFields, type StatedConfidence, statedConfidence } from "../guard/confidence.js";
import { modelView } from "../guard/personal-data.js";
import type { Decision, ToolCallRequest } from "../policies/policy.js";
import { redactText } from "../guard/redact.js";
import { isTerminal } from "./session-state.js";
import { ReservationRefusedError } from "../store/effect-reservations.js";
import {
  LeaseLostError,
  type SessionRecord,
  StaleTransitionError,
  type StepRecord,
  type Usage,
} from "../store/session-store.js";
import { guardSideEffect, refusal } from "../guard/side-effect-guard.js";
import { outOfTask } from "../guard/task-scope.js";
import type { RegisteredTool } from "../tool-registry.js";
import { checkAnswer } from "./answer.js";
import { approve } from "./approve.js";
import {
  contextJson,
  contextOf,
  type Pending,
  type PendingCall,
  pendingJson,
  pendingOf,
  reservationOf,
  type SessionContext,
  sideEffectsOf,
  storedConfidence,
} from "./data.js";
import { execute } from "./execute.js";
import type { Kit, RunnerDeps } from "./kit.js";
import { boundDecision, boundText, MAX_ANSWER_CHARS, MAX_REJECTED_ANSWER_CHARS } from "./model-bounds.js";
import { type SessionMoves, startOf } from "./moves.js";
import { observe, observeInPlace } from "./observe.js";
import { modelSpend, preparePrompt } from "./prompt.js";
import { giveUp, park, wake } from "./park.js";
import type { WaitFor } from "./park-rules.js";
import { argsHash, checkCall, type Refused } from "./plan.js";
import { SessionSpans } from "./spans.js";

/** What the host does with one tool call the policy asked for, decided before anything is written. */
type CallPlan =
  | Refused
  /** A live read the host needs could not be made, for a reason that passes: the session waits for its tool. */
  | ({ readonly kind: "park" } & WaitFor)
  | {
      readonly kind: "approve";
      readonly tool: RegisteredTool;
      readonly call: PendingCall;
      readonly context: SessionContext;
      readonly why: string;
    }
  | {
      readonly kind: "start";
      readonly tool: RegisteredTool;
      readonly call: PendingCall;
      readonly context: SessionContext;
    };

/** A call about to start: what it records with it. */
interface Start {
  readonly tool: RegisteredTool;
  readonly call: PendingCall;
  readonly rest: Pending["queue"];
  readonly context: SessionContext;
  readonly step?: StepRecord;
  readonly reason?: string;
}

/** Reserves refused by a race in a row before the policy hears the call was not made (see #reservationRaced). */
const MAX_RESERVATION_RACES = 5;

export class SessionRunner {
  readonly #kit: Kit;
  /** Races per session and call, while they last; in memory only: a restart simply plans again. */
  readonly #races = new Map<string, number>();

  constructor(deps: RunnerDeps, moves: SessionMoves) {
    this.#kit = { deps, moves, spans: new SessionSpans(deps) };
  }

  /**
   * Runs the session until it ends, waits for a human, or this replica loses its lease.
   * `current` is the record as the caller just read or created it (saves reading it again).
   * Returns the last record seen.
   */
  async run(id: string, signal: AbortSignal, current?: SessionRecord): Promise<SessionRecord | null> {
    const first = current ?? (await this.#kit.deps.store.get(id));
    const span = this.#kit.spans.open(id, first);
    let last: SessionRecord | null = null;
    try {
      last = await this.#run(id, first, signal);
      if (last)
        span.span.setAttributes({
          "loopguard.state": last.state,
          "loopguard.stop_reason": last.stopReason ?? "",
          ...confidenceAttributes(last),
        });
      return last;
    } finally {
      // Tracing never fails a run: a failed session whose steps cannot be read back keeps no trace.
      await this.#kit.spans.close(id, span, last).catch(() => undefined);
    }
  }

  /** A human approved the action the session waits on (see approve.ts). */
  approve(s: SessionRecord, approver: string, why: string): Promise<SessionRecord> {
    return approve(this.#kit, s, approver, why);
  }

  async #run(id: string, first: SessionRecord | null, signal: AbortSignal): Promise<SessionRecord | null> {
    let s = first;
    while (s && !isTerminal(s.state) && !signal.aborted) {
      if (s.state === "AWAITING_APPROVAL") return s;
      // Parked by this run: it waits for its wake; a parked session handed to this run was woken.
      if (s.state === "PARKED" && s !== first) return s;
      try {
        s = await this.#advance(s, signal);
      } catch (error) {
        if (error instanceof LeaseLostError) return null;
        if (!(error instanceof StaleTransitionError)) throw error;
        s = await this.#kit.deps.store.get(id);
      }
    }
    return s;
  }

  #advance(s: SessionRecord, signal: AbortSignal): Promise<SessionRecord> {
    switch (s.state) {
      // A new session's first decision is stored with its start (see SessionMoves.move): one commit, not two.
      case "IDLE":
      case "THINKING":
        return this.#think(s, signal);
      case "TOOL_EXECUTING":
      case "RETRYING":
        return execute(this.#kit, s, signal);
      case "FALLBACK":
        return this.#kit.moves.move(s, "OBSERVING", { audit: { reason: "fallback answer observed" } });
      case "OBSERVING":
        return observe(this.#kit, s);
      case "PARKED":
        return wake(this.#kit, s);
      default:
        throw new Error(`cannot advance a session in ${s.state}`);
    }
  }

  async #think(s: SessionRecord, signal: AbortSignal): Promise<SessionRecord> {
    const { deps, moves, spans } = this.#kit;
    const pending = pendingOf(s);
    const next = pending.queue[0];
    if (next) return this.#prepareCall(s, next, pending, signal);
    const refused = refuseStep(s.usage, s.budget, deps.now());
    if (refused) {
      // What was already done stays said: a budget that ran out after a refund does not hide it.
      const done = sideEffectsOf(s, deps.registry);
      return moves.stop(
        s,
        refused,
        `stopped before step ${s.usage.steps + 1}: ${refused.replace(/_/g, " ")} reached${done.length > 0 ? `; already done: ${done.join(", ")}` : ""}`,
      );
    }
    const policy = deps.policies.get(s.policy);
    if (!policy) return moves.stop(s, "unrecoverable_error", `unknown policy "${s.policy}"`);
    // The policy sees the task's personal data as placeholders only; the history is redacted as it is written.
    const prompt = preparePrompt(this.#kit, s, policy, modelView(s.goal, s.task), contextOf(s));
    if (prompt.kind === "stop") return moves.stop(s, prompt.reason, prompt.answer);
    const ctx = prompt.context;
    const started = performance.now();
    let decision: Decision;
    try {
      decision = await spans.span(
        s,
        "policy.decide",
        { "gen_ai.operation.name": "chat", "loopguard.policy": policy.name },
        (span) => policy.decide({ ...prompt.input, traceContext: trace.setSpan(otelContext.active(), span) }, signal),
      );
    } catch (error) {
      return this.#policyFailed(s, error);
    }
    decision = boundDecision(decision, deps.registry, ctx.history, s.usage.steps + 1);
    const spent = modelSpend(this.#kit, policy, decision, prompt.governed.tokens);
    const usage: Usage = {
      ...s.usage,
      steps: s.usage.steps + 1,
      tokens: s.usage.tokens + spent.tokens,
      costMicros: s.usage.costMicros + spent.costMicros,
    };
    const step = ctx.traceSteps + 1;
    const traced: SessionContext = { ...ctx, traceSteps: step };
    const durationMs = () => performance.now() - started;
    const stated = statedConfidence(decision);
    if (decision.kind === "final") {
      const problem = checkAnswer(decision.answer, ctx.history, deps.registry.citations);
      const record = spans.step(s, {
        step,
        before: s.state,
        after: problem ? "THINKING" : "DONE",
        decision: {
          kind: "final",
          answer: decision.answer,
          accepted: !problem,
          why: problem ?? "",
          ...confidenceFields(stated),
        },
        promptHash: decision.promptHash,
        durationMs: durationMs(),
        context: prompt.record,
      });
      if (problem) {
        const history = [
          ...ctx.history,
          {
            kind: "rejected_answer" as const,
            text: redactText(boundText(decision.answer, MAX_REJECTED_ANSWER_CHARS)),
            why: problem,
          },
        ];
        return moves.move(s, "THINKING", {
          audit: { reason: "answer rejected by the host", outcome: problem },
          patch: { usage, context: contextJson({ ...traced, history }) },
          step: record,
        });
      }
      return moves.stop(s, "done", decision.answer, {
        patch: { usage, context: contextJson(stated ? { ...traced, answerConfidence: stated } : traced) },
        step: record,
      });
    }
    const queue = decision.calls.map((c) => ({
      id: c.id,
      name: c.name,
      arguments: c.arguments,
      ...(c.argumentsBytes === undefined ? {} : { argumentsBytes: c.argumentsBytes }),
    }));
    // The usual case — the first call can start right away — is one transition, THINKING ->
    // TOOL_EXECUTING, carrying the decision's step; anything else stores the decision first.
    const decided: SessionRecord = { ...s, usage, context: contextJson(traced) };
    const plan = queue[0] ? await this.#planCall(decided, queue[0], stated) : undefined;
    const record = (after: "TOOL_EXECUTING" | "THINKING") =>
      spans.step(s, {
        step,
        before: s.state,
        after,
        decision: { kind: "tool_calls", calls: queue, ...confidenceFields(stated) },
        promptHash: decision.promptHash,
        durationMs: durationMs(),
        context: prompt.record,
      });
    if (plan?.kind === "start") {
      const reason = `policy asked for ${queue.length} tool call(s); calling ${plan.tool.name}`;
      try {
        return await this.#startCall(
          decided,
          { ...plan, rest: queue.slice(1), step: record("TOOL_EXECUTING"), reason },
          signal,
        );
      } catch (error) {
        // Another session's reserve got in between: the decision is stored below, and the call planned again.
        if (!(error instanceof ReservationRefusedError)) throw error;
      }
    }
    return moves.move(s, "THINKING", {
      audit: { reason: `policy asked for ${queue.length} tool call(s)` },
      patch: { usage, context: contextJson(traced), pending: pendingJson({ queue, ...confidenceFields(stated) }) },
      step: record("THINKING"),
    });
  }

  /**
   * A model call that failed: a retryable failure is tried again while the session has time and
   * retries left (each one counted in its retry budget); otherwise the session stops.
   */
  async #policyFailed(s: SessionRecord, error: unknown): Promise<SessionRecord> {
    const { deps, moves } = this.#kit;
    const { retryable, retryAfterMs } = error as { retryable?: boolean; retryAfterMs?: number };
    const why = redactText(boundText(String((error as Error).message), MAX_ANSWER_CHARS));
    if (retryable !== true || deadlineOf(s.usage, s.budget) <= deps.now() + 1000)
      return moves.stop(s, "unrecoverable_error", `the policy failed: ${why}`);
    if (retriesLeft(s.usage, s.budget) === 0) {
      const used = s.usage.retries ?? 0;
      return moves.stop(
        s,
        "unrecoverable_error",
        `the policy failed: ${why}; not retried: the session's retry budget (${used} of ${s.budget.maxRetries ?? DEFAULT_MAX_RETRIES}, model and tool calls together) is spent`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(Number(retryAfterMs ?? 500), 5000)));
    const usage: Usage = { ...s.usage, retries: (s.usage.retries ?? 0) + 1 };
    return moves.move(s, "THINKING", { audit: { reason: `model call failed, retrying: ${why}` }, patch: { usage } });
  }

  async #prepareCall(
    s: SessionRecord,
    call: ToolCallRequest,
    pending: Pending,
    signal: AbortSignal,
  ): Promise<SessionRecord> {
    const { deps, moves } = this.#kit;
    const rest = pending.queue.slice(1);
    const plan = await this.#planCall(
      s,
      call,
      pending.confidence === undefined
        ? undefined
        : { value: pending.confidence, reason: pending.uncertaintyReason ?? "" },
    );
    switch (plan.kind) {
      case "observe":
        return observeInPlace(this.#kit, s, call, rest, plan.envelope, plan.reason);
      case "stop":
        return moves.stop(s, plan.reason, plan.answer);
      case "park":
        return park(this.#kit, s, pending, plan) ?? giveUp(this.#kit, s, plan, pending);
      case "approve": {
        const approval = newApproval(
          plan.tool.name,
          plan.call.argsHash,
          plan.call.worldVersion,
          plan.why,
          deps.now(),
          deps.approvals,
        );
        return moves.move(s, "AWAITING_APPROVAL", {
          audit: { reason: `approval needed: ${plan.why}`, tool: plan.tool.name, argsHash: plan.call.argsHash },
          patch: {
            context: contextJson(plan.context),
            pending: pendingJson({ queue: rest, call: plan.call, approval }),
          },
        });
      }
      case "start":
        return this.#startCall(s, { ...plan, rest }, signal).then(
          (started) => {
            this.#races.delete(`${s.id}\n${plan.call.id}`);
            return started;
          },
          (error: unknown) => this.#reservationRaced(s, plan, rest, error),
        );
    }
  }

  /**
   * The reserve, made atomically with the call's record, found totals that other sessions changed
   * since the plan read them: the call is planned again from the new totals (and then usually
   * waits for a human). After a few such races in a row the policy hears EPRECOND (retryable).
   */
  async #reservationRaced(
    s: SessionRecord,
    plan: Extract<CallPlan, { kind: "start" }>,
    rest: Pending["queue"],
    error: unknown,
  ): Promise<SessionRecord> {
    if (!(error instanceof ReservationRefusedError)) throw error;
    const raceKey = `${s.id}\n${plan.call.id}`;
    const races = (this.#races.get(raceKey) ?? 0) + 1;
    if (races < MAX_RESERVATION_RACES) {
      this.#races.set(raceKey, races);
      return s;
    }
    this.#races.delete(raceKey);
    const totals = Object.entries(error.totals)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    const message = `${plan.tool.name} was not made: the amounts other sessions hold kept changing while the host decided (${races} times; last totals with this call: ${totals})`;
    const envelope = refusal({ message, suggestedAction: "try again shortly", retryable: true }, this.#kit.deps.now());
    const request = { id: plan.call.id, name: plan.tool.name, arguments: plan.call.arguments };
    return observeInPlace(this.#kit, s, request, rest, envelope, "amounts kept changing");
  }

  /**
   * The pipeline before a call: the host's checks (plan.ts); for an irreversible one, the
   * side-effect guards (live reads, amounts, risk, entities the task declares), which decide
   * between refusing, asking a human and calling.
   */
  async #planCall(
    s: SessionRecord,
    request: ToolCallRequest,
    confidence: StatedConfidence | undefined,
  ): Promise<CallPlan> {
    const { deps } = this.#kit;
    const checked = checkCall({
      session: s,
      context: contextOf(s),
      call: request,
      registry: deps.registry,
      now: deps.now(),
    });
    if (checked.kind !== "checked") return checked;
    const { tool, args, call, context } = checked;
    const outside = outOfTask(tool, args, s.task, context.history);
    if (outside)
      return {
        kind: "observe",
        envelope: refusal({ ...outside, retryable: false }, deps.now()),
        reason: "outside the task",
      };
    const guard = deps.rules.effectOf(tool);
    if (!guard) return { kind: "start", tool, call, context };
    const verdict = await guardSideEffect(
      deps,
      s,
      guard,
      args,
      String(args[tool.idempotencyKeyField ?? ""] ?? ""),
      confidence,
    );
    switch (verdict.kind) {
      case "park":
        return verdict;
      case "refuse":
        return { kind: "observe", envelope: refusal(verdict, deps.now()), reason: "precondition not met" };
      case "stop":
        return { kind: "stop", reason: "deadline", answer: verdict.answer };
      case "approve":
      case "start": {
        // The request as it goes out: with the bound the host decided on, which the approval's hash covers.
        const argumentsJson = JSON.stringify(verdict.args);
        const guarded: PendingCall = {
          ...call,
          arguments: argumentsJson,
          argsHash: argsHash(tool.name, argumentsJson),
          worldVersion: verdict.worldVersion,
          effect: verdict.effect,
          ...(verdict.reservation ? { reservation: verdict.reservation } : {}),
        };
        return verdict.kind === "approve"
          ? { kind: "approve", tool, call: guarded, context, why: verdict.why }
          : { kind: "start", tool, call: guarded, context };
      }
    }
  }

  /**
   * Records TOOL_EXECUTING, then makes the call. A read-only call goes out while that record is
   * being committed instead of after: re-issuing it is always safe, so a crash before the commit
   * (the session resumes THINKING and decides again) loses nothing, and a step waits for one
   * commit less. Every other call waits for its record, so an interrupted one is known.
   */
  #startCall(
    s: SessionRecord,
    { tool, call, rest, context, step, reason = `calling ${tool.name}` }: Start,
    signal: AbortSignal,
  ): Promise<SessionRecord> {
    const { deps, moves } = this.#kit;
    const patch = {
      context: contextJson(context),
      usage: { ...s.usage, toolCalls: s.usage.toolCalls + 1 },
      pending: pendingJson({ queue: rest, call, startedBy: deps.runId }),
    };
    const money = reservationOf(s, call);
    const recorded = moves.move(s, "TOOL_EXECUTING", {
      audit: { reason, tool: tool.name, argsHash: call.argsHash, expectedTimeoutMs: tool.timeoutMs },
      patch,
      ...(step ? { step } : {}),
      ...(money ? { money } : {}),
    });
    if (tool.effect !== Effect.READ_ONLY) return recorded;
    // Awaited by execute before its first write; this only keeps a failure from going unhandled
    // if the call itself throws first.
    recorded.catch(() => undefined);
    // One version per state the move passes, as SessionMoves.move records it.
    return execute(
      this.#kit,
      { ...s, ...patch, state: "TOOL_EXECUTING", version: s.version + 1 + startOf(s, "TOOL_EXECUTING").length },
      signal,
      recorded,
    );
  }
}

/** The answer's confidence on the session's span, so a trace shows how sure the policy was beside how it stopped. */
function confidenceAttributes(s: SessionRecord): Record<string, number | string> {
  const stated = storedConfidence(s);
  return stated ? { "loopguard.confidence": stated.value, "loopguard.uncertainty_reason": stated.reason } : {};
}
