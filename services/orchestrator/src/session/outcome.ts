// What the user got, beside how the session stopped: a refund task succeeded when its refund was
// made; a question when it was answered live or from a cache within its max age (the client
// serves no older one). An answer built on a tool's degraded answer, or on a failure that would
// have passed, is partial; so is an answer the policy gave with a confidence below the threshold
// (see confidence.ts); anything that stopped short of the task is not done, with why.
import type { SessionRecord } from "../store/session-store.js";
import { isTerminal } from "./session-state.js";
import type { SideEffectRules } from "../guard/side-effects.js";
import { belowThreshold } from "../guard/confidence.js";
import { SINGLE_CALL_POLICY } from "../policies/single-call-policy.js";
import { contextOf, effectsOf } from "./data.js";
import { passesByName } from "./park-rules.js";

export const OUTCOMES = ["succeeded", "partial", "not_done"] as const;

export interface Outcome {
  readonly kind: (typeof OUTCOMES)[number];
  /** Empty when succeeded; else e.g. "tool_unavailable", "no_effect: <tool>", "degraded: <tool>", "low_confidence: …". */
  readonly reason: string;
}

const LOW_CONFIDENCE = "low_confidence";

/** An outcome's reason as a metric label: a low-confidence one without the policy's own words, which are unbounded. */
export function reasonLabel(reason: string): string {
  return reason.startsWith(`${LOW_CONFIDENCE}:`) ? LOW_CONFIDENCE : reason;
}

/**
 * The outcome of an ended session; undefined while it runs. `confidenceThreshold`: an answer to a
 * question given with less is partial (a task that asked for an effect is judged by the effect).
 */
export function outcomeOf(s: SessionRecord, rules: SideEffectRules, confidenceThreshold = 0): Outcome | undefined {
  if (!isTerminal(s.state)) return undefined;
  // A task that asks for an effect succeeded when the effect was made, however the session ended after it.
  const asked = rules.askedFor(s.task);
  if (asked.length > 0) {
    const made = new Set(effectsOf(s).map((e) => e.tool));
    const missing = asked.filter((tool) => !made.has(tool));
    if (missing.length === 0) return { kind: "succeeded", reason: "" };
    if (s.stopReason === "done") return { kind: "not_done", reason: `no_effect: ${missing.join(", ")}` };
  }
  if (s.stopReason !== "done") return { kind: "not_done", reason: s.stopReason ?? "unknown" };
  // A task that states no figure may still have led to an irreversible call (a refund task without
  // its amount): one tried and never made means the user did not get what was asked, whatever the answer says.
  const made = new Set(effectsOf(s).map((e) => e.tool));
  const tried = new Set(
    contextOf(s).history.flatMap((h) =>
      h.kind === "observation" && rules.isIrreversible(h.tool) && !made.has(h.tool) ? [h.tool] : [],
    ),
  );
  if (tried.size > 0) return { kind: "not_done", reason: `no_effect: ${[...tried].join(", ")}` };
  // A forwarded call (the MCP gateway's single-call session) is the whole task: its refusal is the answer, not a success.
  const forwarded =
    s.policy === SINGLE_CALL_POLICY ? contextOf(s).history.findLast((h) => h.kind === "observation") : undefined;
  if (forwarded?.kind === "observation" && !forwarded.envelope.ok)
    return { kind: "not_done", reason: `call_failed: ${forwarded.envelope.error?.code ?? "error"}` };
  const degraded = new Set<string>();
  const failed = new Set<string>();
  for (const item of contextOf(s).history) {
    if (item.kind !== "observation") continue;
    if (item.envelope.servedFrom === "degraded") degraded.add(item.tool);
    else if (!item.envelope.ok && passesByName(item.envelope.error?.code ?? "")) failed.add(item.tool);
  }
  if (degraded.size > 0) return { kind: "partial", reason: `degraded: ${[...degraded].join(", ")}` };
  if (failed.size > 0) return { kind: "partial", reason: `tool_failed: ${[...failed].join(", ")}` };
  const low = asked.length === 0 ? belowThreshold(contextOf(s).answerConfidence, confidenceThreshold) : undefined;
  if (low) return { kind: "partial", reason: `${LOW_CONFIDENCE}: ${low}` };
  return { kind: "succeeded", reason: "" };
}
