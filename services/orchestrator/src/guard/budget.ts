// The budget vector, checked before spending: a step or tool call that would pass a limit is
// refused (and the session stopped with that limit's reason) rather than executed and regretted.
import type { StopReason } from "../session/session-state.js";
import type { BudgetLimits, Spend, Usage } from "../store/session-store.js";

/** Retries a session may make (model and tool calls together) unless its budget says otherwise. */
export const DEFAULT_MAX_RETRIES = 10;

export const DEFAULT_BUDGET: BudgetLimits = Object.freeze({
  maxSteps: 20,
  maxToolCalls: 20,
  maxTokens: 200_000,
  maxCostMicros: 1_000_000,
  deadlineMs: 120_000,
  maxRetries: DEFAULT_MAX_RETRIES,
});

export function deadlineOf(usage: Usage, limits: BudgetLimits): number {
  return usage.startedAt + limits.deadlineMs;
}

/**
 * When a tool call given at most `timeoutMs` must end, on this process's own clock (Date.now), which
 * the tool client, grpc-js and the call's token expiry time it by. `sessionDeadline` (none for a call
 * that always gets its whole timeout) is on the replicas' shared clock, `now` (on PostgreSQL the
 * database's), so the call gets what is left of it as a duration: a replica whose clock is off the
 * database's by seconds would otherwise give every call that much less, or more, than its budget.
 */
export function callDeadline(timeoutMs: number, sessionDeadline: number | undefined, now: number): number {
  return Date.now() + (sessionDeadline === undefined ? timeoutMs : Math.min(timeoutMs, sessionDeadline - now));
}

/** Why one more policy step may not be taken, or null. */
export function refuseStep(usage: Usage, limits: BudgetLimits, now: number): StopReason | null {
  if (now >= deadlineOf(usage, limits)) return "deadline";
  if (usage.steps + 1 > limits.maxSteps) return "max_steps";
  if (usage.tokens >= limits.maxTokens) return "max_tokens";
  if (usage.costMicros >= limits.maxCostMicros) return "max_cost";
  return null;
}

/**
 * Why `calls` more tool calls (one unless told) costing `costMicros` in all may not be made, or null.
 * A session at or over its token or money budget makes none, whatever they cost: the model call that
 * asked for them may have been charged past a budget (what its endpoint reported, within what the
 * host believes: prompt.ts), and its calls are its spending, not a later step's.
 */
export function refuseToolCall(
  usage: Usage,
  limits: BudgetLimits,
  costMicros: number,
  now: number,
  calls = 1,
): StopReason | null {
  if (now >= deadlineOf(usage, limits)) return "deadline";
  if (usage.toolCalls + calls > limits.maxToolCalls) return "max_tool_calls";
  if (usage.tokens >= limits.maxTokens) return "max_tokens";
  if (usage.costMicros >= limits.maxCostMicros || usage.costMicros + costMicros > limits.maxCostMicros)
    return "max_cost";
  return null;
}

/** Retries the session may still make (model and tool calls together). */
export function retriesLeft(usage: Usage, limits: BudgetLimits): number {
  return Math.max(0, (limits.maxRetries ?? DEFAULT_MAX_RETRIES) - (usage.retries ?? 0));
}

/** `usage` with `n` more retries spent: every attempt past a call's first, model and tool calls alike. */
export function withRetries(usage: Usage, n: number): Usage {
  return { ...usage, retries: (usage.retries ?? 0) + n };
}

/** `usage` with `spend` (a model call's tokens and price, a tool call's price, the tool calls it counts) added. */
export function withSpend(usage: Usage, spend: Spend): Usage {
  return {
    ...usage,
    tokens: usage.tokens + spend.tokens,
    costMicros: usage.costMicros + spend.costMicros,
    ...(spend.toolCalls ? { toolCalls: usage.toolCalls + spend.toolCalls } : {}),
  };
}

/** A rough token count for policies that report none (about four characters a token), of a text or a length. */
export function estimateTokens(text: string | number): number {
  return Math.ceil((typeof text === "string" ? text.length : text) / 4);
}

/** A session's limits: the ones asked for, the defaults for the rest (0 asks for the default). */
export function budgetOf(asked: Partial<BudgetLimits>): BudgetLimits {
  return {
    maxSteps: asked.maxSteps || DEFAULT_BUDGET.maxSteps,
    maxToolCalls: asked.maxToolCalls || DEFAULT_BUDGET.maxToolCalls,
    maxTokens: asked.maxTokens || DEFAULT_BUDGET.maxTokens,
    maxCostMicros: asked.maxCostMicros || DEFAULT_BUDGET.maxCostMicros,
    deadlineMs: asked.deadlineMs || DEFAULT_BUDGET.deadlineMs,
    maxRetries: asked.maxRetries || DEFAULT_MAX_RETRIES,
  };
}
