// A policy's confidence in what it decided, and why it is not sure. Both policies state one with
// every final answer (and may with tool calls); the host bounds it here, as it enters, and applies
// the threshold in two places: before an irreversible call the policy proposed below it (the call
// waits for a human, side-effect-guard.ts), and at a question's answer below it (partial,
// session/outcome.ts). A session that already moved money is not stopped by its final answer's
// confidence: nothing it would approve could undo the move, so its confidence is only shown.
import { redactText } from "./redact.js";
import { cutText } from "../session/model-bounds.js";

export interface StatedConfidence {
  /** 0..1. */
  readonly value: number;
  /** What the policy was unsure of; empty when it was sure. */
  readonly reason: string;
}

/** The threshold's default (CONFIDENCE_THRESHOLD). */
export const DEFAULT_CONFIDENCE_THRESHOLD = 0.6;
/** What a model that stated no usable confidence is taken to have said: it counts as 0. */
export const NO_CONFIDENCE_REASON = "model gave no confidence";
/** A reason is quoted in approvals, outcomes and the CLI's one-line views: a sentence or two. */
export const MAX_UNCERTAINTY_REASON_CHARS = 300;

/** A confidence as a number in 0..1, or undefined when `value` is not a finite number (or a numeric string). */
export function clampConfidence(value: unknown): number | undefined {
  const n =
    typeof value === "number" ? value : typeof value === "string" && value.trim() !== "" ? Number(value) : Number.NaN;
  if (!Number.isFinite(n)) return undefined;
  // A model that answers in percent ("85") means 0.85; anything else out of range is clamped.
  const fraction = n > 1 && n <= 100 ? n / 100 : n;
  return Math.min(1, Math.max(0, fraction));
}

/**
 * What the policy stated, within the host's bounds: its reason cut to a sentence or two and
 * redacted (it is written into approvals, traces and the API). Undefined when it stated nothing.
 */
export function statedConfidence(decision: {
  readonly confidence?: number;
  readonly uncertaintyReason?: string;
}): StatedConfidence | undefined {
  if (decision.confidence === undefined) return undefined;
  const value = clampConfidence(decision.confidence) ?? 0;
  const reason = redactText(
    cutText((decision.uncertaintyReason ?? "").replace(/\s+/g, " ").trim(), MAX_UNCERTAINTY_REASON_CHARS),
  );
  return { value, reason };
}

/** As a decision's fields (trace steps, pending calls): none when nothing was stated. */
export function confidenceFields(stated: StatedConfidence | undefined): {
  confidence?: number;
  uncertaintyReason?: string;
} {
  return stated ? { confidence: stated.value, uncertaintyReason: stated.reason } : {};
}

/** A decision's fields (confidenceFields) read back: undefined when nothing was stated. */
export function statedIn(fields: {
  readonly confidence?: number;
  readonly uncertaintyReason?: string;
}): StatedConfidence | undefined {
  return fields.confidence === undefined
    ? undefined
    : { value: fields.confidence, reason: fields.uncertaintyReason ?? "" };
}

/** Why `stated` is too low to act on, or undefined when it is at or above the threshold (or not stated). */
export function belowThreshold(stated: StatedConfidence | undefined, threshold: number): string | undefined {
  if (stated === undefined || stated.value >= threshold) return undefined;
  return `confidence ${stated.value} is below ${threshold}${stated.reason ? `: ${stated.reason}` : ""}`;
}
