// The checks before a model call, made before anything is sent: the prompt counted as the model
// will receive it and governed to fit (context-governance.ts), room for the reply's reserve in the
// model's window and in the session's token budget, the call's price (prompt and reserve) within
// the money budget, and a deadline that is the session's wall clock left, capped.
import { deadlineOf } from "../guard/budget.js";
import { DEFAULT_CONTEXT_LIMITS, type Governed, governContext } from "../governance/context-governance.js";
import { costMicrosOf, priceOf } from "../policies/model-prices.js";
import { DEFAULT_ENCODING, type TokenCounter, tokenCounter } from "../policies/model-tokens.js";
import type { Decision, Policy, PolicyInput } from "../policies/policy.js";
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
 * What a model call spent, and its price: the tokens the endpoint reported, unless a count is under
 * half the host's own (the prompt as governed, the reply as received). A compatible server may
 * report nothing, and a broken or hostile one too little, and the token and money budgets would not
 * hold; the host's count is charged instead and the call is reported. Half leaves room for a model
 * whose tokenizer is thriftier than the host's encoding.
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
  const counted = { input: promptTokens, output: outputTokens(kit, reply) };
  const { usage } = decision;
  // No endpoint reads more than the model's window nor writes more than the reply's reserve the host
  // sent as its max tokens: a report past them (1e300, 2^64) would be charged into figures that
  // serialise nowhere and a cost counter that never comes down.
  const limits = kit.deps.context ?? DEFAULT_CONTEXT_LIMITS;
  const charged = {
    input: believed(usage.input, counted.input, Math.max(limits.windowTokens, 2 * counted.input)),
    output: believed(usage.output, counted.output, Math.max(limits.maxOutputTokens, counted.output)),
  };
  const model = policy.model ?? policy.name;
  // A report of nothing is a server that does not report, not one that under-reports.
  const reported = usage.input > 0 || usage.output > 0;
  if (reported && (charged.input !== usage.input || charged.output !== usage.output))
    kit.deps.onUsageDisbelieved?.(s, model, usage, charged);
  return spend(kit, policy, charged.input, charged.output);
}

/** Past this, a reply is not worth the tokenizer's time: the rest is charged at four characters a token. */
const EXACT_REPLY_CHARS = 64 * 1024;

/** The host's count of a reply's tokens: exact for what a model writes, an estimate for the megabytes a hostile one might. */
function outputTokens(kit: Kit, reply: string): number {
  if (reply.length <= EXACT_REPLY_CHARS) return counterOf(kit).text(reply);
  return counterOf(kit).text(reply.slice(0, EXACT_REPLY_CHARS)) + Math.ceil((reply.length - EXACT_REPLY_CHARS) / 4);
}

/** A report is believed from half the host's count up to what the call could have used at most. */
function believed(reported: number, counted: number, most: number): number {
  if (reported > most) return most;
  return reported * 2 >= counted ? reported : counted;
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
