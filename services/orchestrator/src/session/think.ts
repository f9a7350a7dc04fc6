// One policy decision: the budget checked, the prompt prepared, the model asked, and its decision
// recorded — a final answer accepted or rejected, or tool calls queued (the first one started in
// the same transition when it can start at once). A failed model call is retried within budget.
import { setTimeout as sleep } from "node:timers/promises";
import { context as otelContext, trace } from "@opentelemetry/api";
import { DEFAULT_MAX_RETRIES, deadlineOf, refuseStep, retriesLeft, withRetries, withSpend } from "../guard/budget.js";
import { confidenceFields, statedConfidence } from "../guard/confidence.js";
import { modelView } from "../guard/personal-data.js";
import { redactText } from "../guard/redact.js";
import type { Decision, Policy, TokenUsage } from "../policies/policy.js";
import { ReservationRefusedError } from "../store/effect-reservations.js";
import { type SessionRecord, StaleTransitionError, StoreUnavailableError, type Usage } from "../store/session-store.js";
import { checkAnswer } from "./answer.js";
import { planCall } from "./call-pipeline.js";
import { alreadyDone, contextJson, contextOf, pendingJson, type SessionContext } from "./data.js";
import type { Kit } from "./kit.js";
import {
  boundDecision,
  boundText,
  MAX_ANSWER_CHARS,
  MAX_CALLS_PER_DECISION,
  MAX_REJECTED_ANSWER_CHARS,
} from "./model-bounds.js";
import { cutOffSpend, modelSpend, preparePrompt, unansweredSpend } from "./prompt.js";
import { startCall } from "./start-call.js";

export async function think(kit: Kit, s: SessionRecord, signal: AbortSignal): Promise<SessionRecord> {
  const { deps, moves, spans } = kit;
  const refused = refuseStep(s.usage, s.budget, deps.now());
  if (refused) {
    // What was already done stays said: a budget that ran out after a refund does not hide it.
    return moves.stop(
      s,
      refused,
      `stopped before step ${s.usage.steps + 1}: ${refused.replace(/_/g, " ")} reached${alreadyDone(s, deps.registry)}`,
    );
  }
  const policy = deps.policies.get(s.policy);
  if (!policy) return moves.stop(s, "unrecoverable_error", `unknown policy "${s.policy}"`);
  // The policy sees the task's personal data as placeholders only; the history is redacted as it is written.
  const prompt = preparePrompt(kit, s, policy, modelView(s.goal, s.task), contextOf(s));
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
    if (signal.aborted) return cutOff(kit, s, policy, prompt.governed.tokens);
    return policyFailed(kit, s, error, signal, policy, prompt.governed.tokens);
  }
  const asked = decision.kind === "tool_calls" ? decision.calls.length : 0;
  // Charged for all the model wrote, before the host cuts it down to what it takes.
  const spent = modelSpend(kit, s, policy, decision, prompt.governed.tokens);
  decision = boundDecision(decision, deps.registry, ctx.history, s.usage.steps + 1);
  const usage: Usage = { ...withSpend(s.usage, spent), steps: s.usage.steps + 1 };
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
        spend: spent,
      });
    }
    return moves.stop(s, "done", decision.answer, {
      patch: { usage, context: contextJson(stated ? { ...traced, answerConfidence: stated } : traced) },
      step: record,
      spend: spent,
    });
  }
  const queue = decision.calls.map((c) => ({
    id: c.id,
    name: c.name,
    arguments: c.arguments,
    ...(c.argumentsBytes === undefined ? {} : { argumentsBytes: c.argumentsBytes }),
    ...confidenceFields(stated),
  }));
  // The usual case — the first call can start right away — is one transition, THINKING ->
  // TOOL_EXECUTING, carrying the decision's step; anything else stores the decision first. A call
  // with a side-effect guard is planned only from the stored decision: its live reads are tool
  // calls of the session, made once.
  const decided: SessionRecord = { ...s, usage, context: contextJson(traced) };
  const first = queue[0] && deps.registry.get(queue[0].name);
  const plan = first && !deps.rules.effectOf(first) ? await planCall(kit, decided, queue[0]!, stated) : undefined;
  const record = (after: "TOOL_EXECUTING" | "THINKING") =>
    spans.step(s, {
      step,
      before: s.state,
      after,
      decision: {
        kind: "tool_calls",
        calls: queue,
        ...(asked > queue.length ? { dropped: asked - queue.length } : {}),
        ...confidenceFields(stated),
      },
      promptHash: decision.promptHash,
      durationMs: durationMs(),
      context: prompt.record,
    });
  if (plan?.kind === "start") {
    const reason = `${askedFor(asked, queue.length)}; calling ${plan.tool.name}`;
    try {
      return await startCall(
        kit,
        s,
        { ...plan, rest: queue.slice(1), step: record("TOOL_EXECUTING"), reason, spend: spent, usage },
        signal,
      );
    } catch (error) {
      // Another session's reserve got in between: the decision is stored below, and the call planned again.
      if (!(error instanceof ReservationRefusedError)) throw error;
    }
  }
  return moves.move(s, "THINKING", {
    audit: { reason: askedFor(asked, queue.length) },
    patch: { usage, context: contextJson(traced), pending: pendingJson({ queue }) },
    step: record("THINKING"),
    spend: spent,
  });
}

/** The audit's words for a decision of `asked` calls, of which the host took `taken`. */
function askedFor(asked: number, taken: number): string {
  return `policy asked for ${asked} tool call(s)${asked > taken ? `; the host took the first ${taken} (at most ${MAX_CALLS_PER_DECISION} a reply)` : ""}`;
}

/**
 * A model call cut off by the run's abort (a stop, a lost lease): the session stays THINKING for
 * whoever runs it next, and the call is counted as a retry with its prompt's tokens charged, so a
 * session stopped again and again cannot ask the model past its budgets uncharged. A session that
 * ended meanwhile (the stop was a cancel) is charged the prompt's tokens all the same, and so is one
 * that another replica took over (the lease was lost; its claim counted a takeover); with the store
 * unavailable the charge is carried until the run reads the session again (see SessionMoves.settle).
 */
async function cutOff(kit: Kit, s: SessionRecord, policy: Policy, promptTokens: number): Promise<SessionRecord> {
  const spent = cutOffSpend(kit, policy, promptTokens);
  const usage = withSpend(withRetries(s.usage, 1), spent);
  try {
    return await kit.moves.move(s, "THINKING", {
      audit: { reason: "model call cut off by a stop: counted as a retry, its prompt's tokens charged" },
      patch: { usage },
      spend: spent,
    });
  } catch (error) {
    // A lost lease is a StaleTransitionError too.
    if (error instanceof StaleTransitionError || error instanceof StoreUnavailableError) return s;
    throw error;
  }
}

/**
 * A model call that failed: a retryable failure is tried again while the session has time and
 * retries left (each one counted in its retry budget); otherwise the session stops. A call the
 * model read (timed out after it was sent, its answer unusable) is charged what its answer reported
 * or else its prompt's tokens, so failing calls cannot ask the model past the token and money
 * budgets: a retry of a session the charge left without room stops before its call (preparePrompt).
 */
async function policyFailed(
  kit: Kit,
  s: SessionRecord,
  error: unknown,
  signal: AbortSignal,
  policy: Policy,
  promptTokens: number,
): Promise<SessionRecord> {
  const { deps, moves } = kit;
  const {
    retryable,
    retryAfterMs,
    promptRead,
    usage: reported,
  } = error as {
    retryable?: boolean;
    retryAfterMs?: number;
    promptRead?: boolean;
    usage?: TokenUsage;
  };
  const spent = promptRead === true ? unansweredSpend(kit, s, policy, reported, promptTokens) : undefined;
  const charged = (usage: Usage) => (spent ? { patch: { usage: withSpend(usage, spent) }, spend: spent } : {});
  const why = redactText(boundText(String((error as Error).message), MAX_ANSWER_CHARS));
  if (retryable !== true || deadlineOf(s.usage, s.budget) <= deps.now() + 1000)
    return moves.stop(s, "unrecoverable_error", `the policy failed: ${why}`, charged(s.usage));
  if (retriesLeft(s.usage, s.budget) === 0) {
    const used = s.usage.retries ?? 0;
    return moves.stop(
      s,
      "unrecoverable_error",
      `the policy failed: ${why}; not retried: the session's retry budget (${used} of ${s.budget.maxRetries ?? DEFAULT_MAX_RETRIES}, model and tool calls together) is spent`,
      charged(s.usage),
    );
  }
  // A pause that would end past the deadline is a retry that could never be made: none is counted.
  const pause = Math.min(Number(retryAfterMs ?? 500), 5000);
  const deadline = deadlineOf(s.usage, s.budget);
  if (deps.now() + pause >= deadline)
    return moves.stop(
      s,
      "deadline",
      `the policy failed: ${why}; not retried: its pause of ${pause} ms before a retry would end past the session's deadline`,
      charged(s.usage),
    );
  const usage = withRetries(s.usage, 1);
  const retrying = await moves.move(s, "THINKING", {
    audit: { reason: `model call failed, retrying: ${why}` },
    patch: { usage },
    ...charged(usage),
  });
  // A stop during the pause ends it: the session stays THINKING, and whoever runs it next asks the model.
  await sleep(Math.max(0, Math.min(pause, deadline - deps.now())), undefined, { signal }).catch(() => undefined);
  return retrying;
}
