// The `openai` policy: any OpenAI-compatible Chat Completions endpoint with tool calling, reached
// through the `openai` SDK. The model sees only tool names, descriptions and JSON schemas. Whatever
// it replies is turned into a Decision, even when malformed (unknown tool, bad JSON): the host makes
// those observations the next step can correct (DESIGN, principle 2). Only transport failures throw.
import { createHash } from "node:crypto";
import OpenAI from "openai";
import type { ChatCompletionCreateParamsNonStreaming } from "openai/resources/chat/completions";
import { boundedFetch } from "./bounded-fetch.js";
import { toDecision } from "./chat-reply.js";
import { toChatMessages, toChatTool } from "./chat-request.js";
import { costMicrosOf, type ModelPrice } from "./model-prices.js";
import { modelCallSpan } from "./model-span.js";
import { timedOut, unavailable } from "./openai-errors.js";
import type { Decision, Policy, PolicyInput } from "./policy.js";

export { OPENAI_POLICY_SYSTEM_PROMPT } from "./chat-request.js";
export { PolicyUnavailableError } from "./policy-unavailable.js";

export interface OpenAiPolicyOptions {
  /** e.g. "https://api.openai.com/v1" or "http://127.0.0.1:11434/v1"; the SDK appends `/chat/completions`. */
  readonly baseUrl: string;
  readonly model: string;
  /** Sent as `Authorization: Bearer …` only when set; never written into an error. */
  readonly apiKey?: string;
  /** Per request, including reading the body. Default 30 000. The SDK does not retry: the session runner does. */
  readonly timeoutMs?: number;
  /** The model's price, for the cost on the call's span (the runner charges the session from the same table). */
  readonly price?: ModelPrice;
}

const DEFAULT_TIMEOUT_MS = 30_000;
/** The reply's limit when the host sets none (it always does: MODEL_MAX_OUTPUT_TOKENS). */
const DEFAULT_MAX_OUTPUT_TOKENS = 1024;

/**
 * The request field that limits the reply: the o-series and gpt-5 reject `max_tokens` and want
 * `max_completion_tokens`; older OpenAI models and most compatible servers know only `max_tokens`.
 */
export function maxTokensFieldOf(model: string): "max_tokens" | "max_completion_tokens" {
  return /^(o\d|gpt-5)/.test(model.toLowerCase().replace(/^.*\//, "")) ? "max_completion_tokens" : "max_tokens";
}
/**
 * The most of a reply that is read: a completion with an 8 KiB answer, or a dozen tool calls at
 * their 16 KiB request limit, is far smaller; a larger one is a runaway or hostile endpoint.
 */
export const MAX_RESPONSE_BYTES = 256 * 1024;

export function createOpenAiPolicy(options: OpenAiPolicyOptions): Policy {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const client = new OpenAI({
    baseURL: options.baseUrl.replace(/\/+$/, ""),
    // The SDK insists on a key; without one, the explicit null header sends no Authorization at all.
    apiKey: options.apiKey ?? "unused",
    ...(options.apiKey ? {} : { defaultHeaders: { authorization: null } }),
    organization: null,
    project: null,
    timeout: timeoutMs,
    fetch: boundedFetch(MAX_RESPONSE_BYTES),
    maxRetries: 0,
    logLevel: "off",
  });

  const maxTokensField = maxTokensFieldOf(options.model);
  return {
    name: "openai",
    model: options.model,
    async decide(input: PolicyInput, signal: AbortSignal): Promise<Decision> {
      const messages = toChatMessages(input);
      const tools = input.tools.map(toChatTool);
      const promptHash = createHash("sha256").update(JSON.stringify({ messages, tools })).digest("hex");
      // The session's wall clock left cuts the configured cap shorter: a call never outlives its session.
      const callTimeoutMs = Math.max(1, Math.min(timeoutMs, input.timeoutMs ?? timeoutMs));
      const maxTokens = input.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS;
      return modelCallSpan(options.model, maxTokens, input.traceContext, async (span, headers) => {
        // The whole call, its body too: the SDK's own timer stops once the headers arrive, and an
        // endpoint that drips its body a byte at a time would hold the session past its wall clock.
        const deadline = AbortSignal.timeout(callTimeoutMs);
        let completion: unknown;
        try {
          // Some endpoints reject an empty `tools` array, so a tool-less request omits both fields.
          const body = {
            model: options.model,
            messages,
            [maxTokensField]: maxTokens,
            ...(tools.length > 0 ? { tools, tool_choice: "auto" as const } : {}),
          };
          completion = await client.chat.completions.create(body as unknown as ChatCompletionCreateParamsNonStreaming, {
            signal: AbortSignal.any([signal, deadline]),
            timeout: callTimeoutMs,
            headers,
          });
        } catch (err) {
          // A caller's cancellation is not an outage: let the host see its own abort reason.
          if (signal.aborted) throw signal.reason;
          if (deadline.aborted) throw timedOut(callTimeoutMs);
          throw unavailable(err, callTimeoutMs, options.apiKey);
        }
        const decision = toDecision(completion, input, promptHash);
        const { input: inputTokens, output: outputTokens } = decision.usage;
        span.setAttributes({
          "gen_ai.usage.input_tokens": inputTokens,
          "gen_ai.usage.output_tokens": outputTokens,
          "loopguard.cost_micros": costMicrosOf(options.price, decision.usage),
        });
        return decision;
      });
    },
  };
}
