// The structured field a Chat Completions model states its confidence in: the text of its reply,
// as one JSON object. A JSON object in the text works on every compatible server, with or without
// tools (a `final_answer` tool would need tool calling, and `response_format` cannot be combined
// with tools on all of them). A final answer without a usable confidence counts as 0, "model gave
// no confidence": an answer to a question is then partial. Beside tool calls, a confidence counts
// only when the model wrote the object: reads need none, and an irreversible call is already held
// to the host's amount and risk rules; a stated one that is not a number counts as 0 (a human approves).
import { clampConfidence, NO_CONFIDENCE_REASON } from "../guard/confidence.js";

/** Appended to the system prompt. */
export const CONFIDENCE_INSTRUCTIONS =
  "When the goal is met, reply without tool calls, with only this JSON object as your text: " +
  '{"answer": "<your answer>", "confidence": <0 to 1: how sure you are the answer is right and complete>, ' +
  '"uncertainty_reason": "<what you are unsure of; empty when sure>"}. ' +
  "When you call a tool that changes something (such as a refund), write in the same reply, as its text, " +
  '{"confidence": <0 to 1: how sure you are this action is right>, "uncertainty_reason": "<what you are unsure of>"}.';

export interface ModelConfidence {
  readonly confidence: number;
  readonly uncertaintyReason: string;
}

/** A final reply: the answer, and the confidence the model stated with it. */
export function parseFinalReply(text: string): { readonly answer: string } & ModelConfidence {
  const stated = jsonObject(text);
  // A JSON object without an answer is not the shape asked for: the text itself is the answer.
  const answer = typeof stated?.answer === "string" ? stated.answer : text;
  return { answer, ...confidenceOf(stated) };
}

/** The confidence stated in the text beside tool calls; nothing when the model wrote no such object. */
export function parseActionConfidence(text: string): ModelConfidence | Record<string, never> {
  const stated = jsonObject(text);
  return stated && ("confidence" in stated || "uncertainty_reason" in stated) ? confidenceOf(stated) : {};
}

function confidenceOf(stated: Record<string, unknown> | undefined): ModelConfidence {
  const confidence = clampConfidence(stated?.confidence);
  if (confidence === undefined) return { confidence: 0, uncertaintyReason: NO_CONFIDENCE_REASON };
  const reason = stated?.uncertainty_reason;
  return { confidence, uncertaintyReason: typeof reason === "string" ? reason : "" };
}

/** The reply's JSON object: the whole text, or inside a Markdown code fence, as models often write it. */
function jsonObject(text: string): Record<string, unknown> | undefined {
  const trimmed = text.trim();
  const fenced = /^```(?:json)?\s*([\s\S]*?)\s*```$/i.exec(trimmed)?.[1] ?? trimmed;
  if (!fenced.startsWith("{")) return undefined;
  try {
    const value: unknown = JSON.parse(fenced);
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
