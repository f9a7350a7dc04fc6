// The checks before a model call, made before anything is sent: the prompt counted as the model
// will receive it and governed to fit (context-governance.ts), room for the reply's reserve in the
// model's window and in the session's token budget, the call's price (prompt and reserve) within
// the money budget, and a deadline that is the session's wall clock left, capped.
import { deadlineOf } from "../guard/budget.js";
import { DEFAULT_CONTEXT_LIMITS, type Governed, governContext } from "../governance/context-governance.js";
import { costMicrosOf, priceOf } from "../policies/model-prices.js";
import { DEFAULT_ENCODING, type TokenCounter, tokenCounter } from "../policies/model-tokens.js";
import type { Decision, Policy, PolicyInput, TokenUsage } from "../policies/policy.js";
import type { StopReason } from "./session-state.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import type { SessionContext } from "./data.js";
import type { Kit } from "./kit.js";
import { toolsNow } from "./park.js";

let fallbackCounter: TokenCounter | undefined;

/** The runner's counter, or one for the default encoding (tests and tools that build a runner without config). */
export function counterOf(kit: Kit): TokenCounter {
  if (kit.deps.tokenCounter) return kit.deps.tokenCounter;
  fallbackCounter ??= tokenCounter(DEFAULT_ENCODING);
  return fallbackCounter;
}

export type Prompt =
  | { readonly kind: "stop"; readonly reason: StopReason; readonly answer: string }
  | {
      readonly kind: "call";
      readonly input: PolicyInput;
      readonly governed: Governed;
      readonly context: SessionContext;
      readonly record: JsonObject;
    };

/** What the policy is asked for step `s.usage.steps + 1`, or why it is not asked at all. */
export function preparePrompt(
  kit: Kit,
  s: SessionRecord,
  policy: Policy,
  view: { goal: string; task: JsonObject },
  ctx: SessionContext,
): Prompt {
  const { deps } = kit;
  const limits = deps.context ?? DEFAULT_CONTEXT_LIMITS;
  const step = s.usage.steps + 1;
  const tools = toolsNow(kit, s);
  const tokensLeft = s.budget.maxTokens - s.usage.tokens;
  const governed = governContext({ ...view, tools, history: ctx.history }, limits, counterOf(kit), tokensLeft);
  deps.onContext?.(s, governed);
  if (!governed.fits) {
    const limit =
      limits.windowTokens <= tokensLeft
        ? `the model's context window (${limits.windowTokens} tokens)`
        : `the session's token budget left (${tokensLeft} tokens)`;
    return {
      kind: "stop",
      reason: "max_tokens",
      answer: `stopped before step ${step} without calling the model: the prompt (${governed.tokens} tokens after compressing old results) and the reply's reserve (${limits.maxOutputTokens} tokens) do not fit ${limit}`,
    };
  }
  const price = priceOf(deps.prices ?? new Map(), policy.model);
  const worstCase = costMicrosOf(price, { input: governed.tokens, output: limits.maxOutputTokens });
  if (s.usage.costMicros + worstCase > s.budget.maxCostMicros) {
    return {
      kind: "stop",
      reason: "max_cost",
      answer: `stopped before step ${step} without calling the model: its call may cost up to ${worstCase} micros (prompt and reply reserve at ${policy.model}'s price) and ${s.budget.maxCostMicros - s.usage.costMicros} are left`,
    };
  }
  const timeoutMs = deadlineOf(s.usage, s.budget) - deps.now();
  if (timeoutMs <= 0)
    return { kind: "stop", reason: "deadline", answer: `stopped before step ${step}: deadline reached` };
  const context: SessionContext = {
    ...ctx,
    history: governed.history,
    contextTokens: governed.tokens,
    compressions: (ctx.compressions ?? 0) + governed.compressed,
    savedTokens: (ctx.savedTokens ?? 0) + governed.tokensBefore - governed.tokens,
    contextAlarms: (ctx.contextAlarms ?? 0) + (governed.alarm ? 1 : 0),
    contextWindow: limits.windowTokens,
  };
  const record = {
    tokens_before: governed.tokensBefore,
    tokens: governed.tokens,
    compressed: governed.compressed,
    window: limits.windowTokens,
    alarm: governed.alarm,
  };
  const input: PolicyInput = {
    ...view,
    tools,
    history: governed.history,
    step,
    promptTokens: governed.tokens,
    maxOutputTokens: limits.maxOutputTokens,
    timeoutMs,
  };
  return { kind: "call", input, governed, context, record };
}

/**
 * What a model call spent, and its price: the tokens the endpoint reported, as far as the host
 * believes them (believedUsage), the host's own count being the prompt as governed and everything
 * the model wrote as received.
 */
export function modelSpend(
  kit: Kit,
  s: SessionRecord,
  policy: Policy,
  decision: Decision,
  promptTokens: number,
): { tokens: number; costMicros: number } {
  // Everything the model wrote, as it came: the text beside its calls, every call (those past the
  // host's limits too) and the whole answer, or an endpoint that reports a token would have the rest
  // written for free (`decision` is the policy's, before boundDecision cuts it down).
  const reply =
    decision.kind === "final"
      ? decision.answer
      : (decision.text ?? "") + decision.calls.map((c) => `${c.name}${c.arguments}`).join("");
  return reportedSpend(kit, s, policy, decision.usage, { input: promptTokens, output: outputTokens(kit, reply) });
}

/**
 * The one rule for what the host believes of a model call's reported usage, given its own count:
 * the prompt from half the host's count up to twice it, the reply from half the host's count up to
 * the max tokens sent (MODEL_MAX_OUTPUT_TOKENS, which preparePrompt fitted into the tokens left).
 * Under half, the host's count is charged: a compatible server may report nothing, and a broken or
 * hostile one too little. Past the most, the most: no model writes past its max tokens, and a prompt
 * reported at many times the host's count (120,000 for a 700-token prompt, or 1e300) is no tokenizer's
 * difference but a report the budgets cannot hold. Half and twice leave room for a model whose
 * tokenizer is thriftier, or more lavish, than the host's encoding; a session the charge takes past
 * its budgets makes no more calls (refuseToolCall, refuseStep).
 */
function believedUsage(reported: TokenUsage, counted: TokenUsage, maxOutputTokens: number): TokenUsage {
  return {
    input: believed(reported.input, counted.input, 2 * counted.input),
    output: believed(reported.output, counted.output, maxOutputTokens),
  };
}

/** What a model call is charged for `reported` usage against the host's count: its believed usage, reported when it is not what was reported. */
function reportedSpend(
  kit: Kit,
  s: SessionRecord,
  policy: Policy,
  reported: TokenUsage,
  counted: TokenUsage,
): { tokens: number; costMicros: number } {
  const limits = kit.deps.context ?? DEFAULT_CONTEXT_LIMITS;
  const charged = believedUsage(reported, counted, limits.maxOutputTokens);
  // A report of nothing is a server that does not report, not one that under-reports.
  const told = reported.input > 0 || reported.output > 0;
  if (told && (charged.input !== reported.input || charged.output !== reported.output))
    kit.deps.onUsageDisbelieved?.(s, policy.model ?? policy.name, reported, charged);
  return spend(kit, policy, charged.input, charged.output);
}

/** Past this, a reply is not worth the tokenizer's time: the rest is charged at four characters a token. */
const EXACT_REPLY_CHARS = 64 * 1024;

/** The host's count of a reply's tokens: exact for what a model writes, an estimate for the megabytes a hostile one might. */
function outputTokens(kit: Kit, reply: string): number {
  if (reply.length <= EXACT_REPLY_CHARS) return counterOf(kit).text(reply);
  return counterOf(kit).text(reply.slice(0, EXACT_REPLY_CHARS)) + Math.ceil((reply.length - EXACT_REPLY_CHARS) / 4);
}

/** A report believed from half the host's count up to `most`. */
function believed(reported: number, counted: number, most: number): number {
  return Math.min(most, reported * 2 >= counted ? reported : counted);
}

/**
 * What a model call the model read is charged when no decision came of it (it timed out after it was
 * sent, its answer came too large, not JSON or without a message): what the answer reported, as far
 * as the host believes it, else its prompt as counted.
 */
export function unansweredSpend(
  kit: Kit,
  s: SessionRecord,
  policy: Policy,
  reported: TokenUsage | undefined,
  promptTokens: number,
): { tokens: number; costMicros: number } {
  return reportedSpend(kit, s, policy, reported ?? { input: 0, output: 0 }, { input: promptTokens, output: 0 });
}

/** What a model call cut off before its answer is charged: its prompt, as if the model had read it. */
export function cutOffSpend(kit: Kit, policy: Policy, promptTokens: number): { tokens: number; costMicros: number } {
  return spend(kit, policy, promptTokens, 0);
}

function spend(kit: Kit, policy: Policy, input: number, output: number): { tokens: number; costMicros: number } {
  const costMicros = costMicrosOf(priceOf(kit.deps.prices ?? new Map(), policy.model), { input, output });
  kit.deps.onModelCall?.(policy.model ?? policy.name, { input, output }, costMicros);
  return { tokens: input + output, costMicros };
}
