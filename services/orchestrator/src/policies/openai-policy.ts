// The `openai` policy: any OpenAI-compatible Chat Completions endpoint with tool calling, reached
// through the `openai` SDK. The model sees only tool names, descriptions and JSON schemas. Whatever
// it replies is turned into a Decision, even when malformed (unknown tool, bad JSON): the host makes
// those observations the next step can correct (DESIGN, principle 2). Only transport failures throw.
import { createHash } from "node:crypto";
import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError } from "openai";
import type {
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionFunctionTool,
  ChatCompletionMessageFunctionToolCall,
  ChatCompletionMessageParam,
} from "openai/resources/chat/completions";
import { costMicrosOf, type ModelPrice } from "./model-prices.js";
import type { Decision, Policy, PolicyInput, TokenUsage, ToolCallRequest, ToolSpec } from "./policy.js";
import { TOOL_CALL_ID } from "../session/model-bounds.js";
import { boundedFetch, ResponseTooLargeError } from "./bounded-fetch.js";
import { CONFIDENCE_INSTRUCTIONS, parseActionConfidence, parseFinalReply } from "./model-confidence.js";
import { modelCallSpan } from "./model-span.js";

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

/** The endpoint could not produce a decision: HTTP error, timeout, network failure or a body that is not a chat completion. */
export class PolicyUnavailableError extends Error {
  override readonly name = "PolicyUnavailableError";
  readonly retryable: boolean;
  /** From `retry-after-ms` / `retry-after` when the endpoint sent one. */
  readonly retryAfterMs: number | undefined;
  /** HTTP status when there was a response. */
  readonly status: number | undefined;

  constructor(message: string, opts: { retryable: boolean; retryAfterMs?: number; status?: number; cause?: unknown }) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.retryable = opts.retryable;
    this.retryAfterMs = opts.retryAfterMs;
    this.status = opts.status;
  }
}

export const OPENAI_POLICY_SYSTEM_PROMPT =
  "You are an agent working for a platform team. Reach the goal by calling the tools you are " +
  "given: use them to look facts up and to act, one decision at a time. In your answer, " +
  "cite the document ids and refund ids it relies on. Never invent ids: use only ids that appear in the task or in tool results. " +
  "Personal data is shown as placeholders such as {{task.phone}}: pass them to tools and write " +
  "them in answers exactly as shown; the host fills in the values. A result served from a cache " +
  "is a past answer: say how old it is (its ageMs and observedAt). A degraded result means the " +
  "tool was unavailable (its note says so): say that, never that what you looked for does not exist. " +
  CONFIDENCE_INSTRUCTIONS;

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
const ERROR_DETAIL_MAX_CHARS = 300;

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
  const redact = (text: string): string => (options.apiKey ? text.split(options.apiKey).join("[redacted]") : text);

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
            signal,
            timeout: callTimeoutMs,
            headers,
          });
        } catch (err) {
          // A caller's cancellation is not an outage: let the host see its own abort reason.
          if (signal.aborted) throw signal.reason;
          throw unavailable(err, callTimeoutMs, redact);
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

/** What the SDK threw, as the PolicyUnavailableError the session runner retries or gives up on. */
function unavailable(err: unknown, timeoutMs: number, redact: (text: string) => string): PolicyUnavailableError {
  const tooLarge = err instanceof APIConnectionError ? err.cause : err;
  // Not retried: the same model asked the same question again would most likely run away again.
  if (tooLarge instanceof ResponseTooLargeError)
    return new PolicyUnavailableError(tooLarge.message, { retryable: false });
  if (err instanceof APIConnectionTimeoutError) {
    return new PolicyUnavailableError(`chat completions timed out after ${timeoutMs} ms`, { retryable: true });
  }
  if (err instanceof APIError && err.status !== undefined) {
    const retryAfterMs = err.headers ? parseRetryAfter(err.headers) : undefined;
    return new PolicyUnavailableError(redact(`chat completions returned HTTP ${err.status}${errorDetail(err)}`), {
      retryable: err.status === 429 || err.status >= 500,
      status: err.status,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    });
  }
  if (err instanceof SyntaxError) {
    return new PolicyUnavailableError("chat completions returned a body that is not JSON", { retryable: true });
  }
  const reason = err instanceof APIConnectionError ? describeNetworkError(err.cause) : describeNetworkError(err);
  return new PolicyUnavailableError(redact(`chat completions request failed: ${reason}`), { retryable: true });
}

export function toChatTool(tool: ToolSpec): ChatCompletionFunctionTool {
  const description = tool.unavailableUntil
    ? `${tool.description} [Unavailable now: its circuit breaker is open; no call is sent before ${tool.unavailableUntil}.]`
    : tool.description;
  return { type: "function", function: { name: tool.name, description, parameters: tool.parameters } };
}

/** PolicyInput → the message list. Exported so callers can inspect or count what the model sees. */
export function toChatMessages(input: Pick<PolicyInput, "goal" | "task" | "history">): ChatCompletionMessageParam[] {
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: OPENAI_POLICY_SYSTEM_PROMPT },
    { role: "user", content: `Goal: ${input.goal}\n\nTask (JSON):\n${JSON.stringify(input.task)}` },
  ];
  // Chat Completions rejects a request where an assistant tool call has no tool message
  // after it, and a tool message that answers no call. History cut short (a session stopped
  // between calls, compressed context) must not make every later request fail.
  const unanswered: { id: string; tool: string }[] = [];
  let group: ChatCompletionMessageFunctionToolCall[] | null = null;
  const closeTurn = (): void => {
    group = null;
    for (const call of unanswered.splice(0)) {
      messages.push({
        role: "tool",
        tool_call_id: call.id,
        content: JSON.stringify({
          ok: false,
          note: `no result was recorded for this ${call.tool} call; it may not have run`,
        }),
      });
    }
  };

  for (const item of input.history) {
    switch (item.kind) {
      case "call": {
        if (group === null) {
          closeTurn();
          group = [];
          messages.push({ role: "assistant", content: null, tool_calls: group });
        }
        group.push({ id: item.callId, type: "function", function: { name: item.tool, arguments: item.arguments } });
        unanswered.push({ id: item.callId, tool: item.tool });
        break;
      }
      case "observation": {
        group = null;
        const content = JSON.stringify(item.envelope);
        const index = unanswered.findIndex((call) => call.id === item.callId);
        if (index >= 0) {
          unanswered.splice(index, 1);
          messages.push({ role: "tool", tool_call_id: item.callId, content });
        } else {
          closeTurn();
          messages.push({ role: "user", content: `Result of call ${item.callId} (${item.tool}):\n${content}` });
        }
        break;
      }
      case "rejected_answer": {
        closeTurn();
        messages.push({ role: "assistant", content: item.text });
        messages.push({
          role: "user",
          content: `That answer was not accepted: ${item.why}\nContinue: call tools if you need more facts or actions, then answer again.`,
        });
        break;
      }
    }
  }
  closeTurn();
  return messages;
}

function toDecision(body: unknown, input: PolicyInput, promptHash: string): Decision {
  const choice = asRecord(asArray(asRecord(body)?.choices)?.[0]);
  const message = asRecord(choice?.message);
  if (message === undefined) {
    throw new PolicyUnavailableError("chat completions returned a body without choices[0].message", {
      retryable: true,
    });
  }
  const usage = toUsage(asRecord(asRecord(body)?.usage));

  const rawCalls = asArray(message.tool_calls) ?? [];
  // Older compatible servers still answer with the deprecated single `function_call`.
  const legacy = asRecord(message.function_call);
  const entries = rawCalls.length > 0 ? rawCalls : legacy ? [{ function: legacy }] : [];
  if (entries.length > 0) {
    const taken = new Set<string>();
    for (const item of input.history) if (item.kind !== "rejected_answer") taken.add(item.callId);
    const calls = entries.map((entry, index): ToolCallRequest => {
      const call = asRecord(entry);
      const fn = asRecord(call?.function);
      const modelId = call?.id;
      // Ids must be unique within the session; some servers omit them or reuse "call_0" every turn, and a hostile one sends megabytes.
      const id =
        typeof modelId === "string" && TOOL_CALL_ID.test(modelId) && !taken.has(modelId)
          ? modelId
          : uniqueId(`call_${input.step}_${index}`, taken);
      taken.add(id);
      return { id, name: typeof fn?.name === "string" ? fn.name : "", arguments: rawArguments(fn?.arguments) };
    });
    return { kind: "tool_calls", calls, usage, ...parseActionConfidence(messageText(message)), promptHash };
  }

  return { kind: "final", ...parseFinalReply(messageText(message)), usage, promptHash };
}

function uniqueId(base: string, taken: ReadonlySet<string>): string {
  let id = base;
  for (let n = 2; taken.has(id); n++) id = `${base}_${n}`;
  return id;
}

/** The arguments exactly as the model wrote them; the host parses and validates. */
function rawArguments(value: unknown): string {
  if (typeof value === "string") return value;
  // A server that omits arguments means "no arguments"; some send an already-parsed object.
  if (value === undefined || value === null) return "{}";
  return JSON.stringify(value);
}

function messageText(message: Record<string, unknown>): string {
  const { content, refusal } = message;
  if (typeof content === "string" && content.length > 0) return content;
  if (Array.isArray(content)) {
    const parts = content
      .map((part) => asRecord(part)?.text)
      .filter((text): text is string => typeof text === "string");
    if (parts.length > 0) return parts.join("");
  }
  if (typeof refusal === "string") return refusal;
  return typeof content === "string" ? content : "";
}

function toUsage(usage: Record<string, unknown> | undefined): TokenUsage {
  const count = (value: unknown): number =>
    typeof value === "number" && Number.isFinite(value) && value >= 0 ? Math.floor(value) : 0;
  return { input: count(usage?.prompt_tokens), output: count(usage?.completion_tokens) };
}

function parseRetryAfter(headers: Headers): number | undefined {
  const ms = headers.get("retry-after-ms");
  if (ms !== null && ms.trim() !== "" && Number.isFinite(Number(ms)) && Number(ms) >= 0) {
    return Math.ceil(Number(ms));
  }
  const value = headers.get("retry-after");
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? Math.ceil(seconds * 1000) : undefined;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

/** A short reason from the error body (OpenAI's `{error:{message}}` or plain text), for the operator. */
function errorDetail(err: APIError): string {
  // The SDK's message is "<status> <the body's error.message, or the body itself>".
  const detail = err.message.slice(String(err.status).length).replace(/\s+/g, " ").trim();
  if (detail === "" || detail === "status code (no body)") return "";
  return `: ${detail.length > ERROR_DETAIL_MAX_CHARS ? `${detail.slice(0, ERROR_DETAIL_MAX_CHARS)}…` : detail}`;
}

function describeNetworkError(err: unknown): string {
  const cause = err instanceof Error ? asRecord(err.cause) : undefined;
  const code = cause?.code;
  if (typeof code === "string") return code;
  return err instanceof Error ? err.message : String(err);
}

function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function asArray(value: unknown): unknown[] | undefined {
  return Array.isArray(value) ? value : undefined;
}
