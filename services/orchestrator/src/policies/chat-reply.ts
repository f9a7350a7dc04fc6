// A chat completion's body turned into a Decision, however malformed its tool calls are (the host
// makes observations of those); only a body that is no chat completion at all throws.
import { argumentsText, TOOL_CALL_ID } from "../session/model-bounds.js";
import { parseActionConfidence, parseFinalReply } from "./model-confidence.js";
import { PolicyUnavailableError } from "./policy-unavailable.js";
import type { Decision, PolicyInput, TokenUsage, ToolCallRequest } from "./policy.js";

export function toDecision(body: unknown, input: PolicyInput, promptHash: string): Decision {
  const choice = asRecord(asArray(asRecord(body)?.choices)?.[0]);
  const message = asRecord(choice?.message);
  const usage = toUsage(asRecord(asRecord(body)?.usage));
  if (message === undefined) {
    // The endpoint answered: the model read the prompt, and the host charges it (with what the body reports).
    throw new PolicyUnavailableError("chat completions returned a body without choices[0].message", {
      retryable: true,
      promptRead: true,
      usage,
    });
  }

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
    const text = messageText(message);
    return { kind: "tool_calls", calls, text, usage, ...parseActionConfidence(text), promptHash };
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
  return argumentsText(value);
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

function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function asArray(value: unknown): unknown[] | undefined {
  return Array.isArray(value) ? value : undefined;
}
