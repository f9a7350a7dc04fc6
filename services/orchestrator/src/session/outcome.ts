// What the user got, beside how the session stopped: a refund task succeeded when its refund was
// made as asked (on every order the task names, adding up to its amount; else partial); a question
// when it was answered live or from a cache within its max age (the client serves no older one).
// An answer built on a tool's degraded answer, on a failure that would have passed or on the tool's
// own fault, is partial; so is an answer the policy gave with a confidence below the threshold (see
// confidence.ts); anything that stopped short of the task is not done, with why; and one that ended
// with an irreversible call sent and never settled says so (effect_unknown: it may have been made,
// and its hold is kept until someone checks the tool's records).
import type { SessionRecord } from "../store/session-store.js";
import { isTerminal } from "./session-state.js";
import type { AskedEffect, SideEffectRules } from "../guard/side-effects.js";
import { belowThreshold } from "../guard/confidence.js";
import { SINGLE_CALL_POLICY } from "../policies/single-call-policy.js";
import { contextOf, type EffectRecord, effectsOf, pendingOf } from "./data.js";
import { passesByName } from "./park-rules.js";

export const OUTCOMES = ["succeeded", "partial", "not_done"] as const;

export interface Outcome {
  readonly kind: (typeof OUTCOMES)[number];
  /** Empty when succeeded; else e.g. "tool_unavailable", "no_effect: <tool>", "effect_unknown: <tool>", "not_as_asked: …", "degraded: <tool>", "low_confidence: …". */
  readonly reason: string;
}

export const LOW_CONFIDENCE = "low_confidence";

/**
 * Codes of a tool's own fault (a bug, a broken release), not of the request: like a failure that
 * would have passed, no data of the tool's stands behind an answer given after one. A caller's
 * mistake (NOT_FOUND, INVALID_ARGUMENT) or the host's refusal (EPRECOND …) is an answer in itself.
 */
const TOOL_FAULTS: ReadonlySet<string> = new Set(["INTERNAL", "UNKNOWN", "DATA_LOSS", "UNIMPLEMENTED"]);

function toolFailed(code: string): boolean {
  return passesByName(code) || TOOL_FAULTS.has(code);
}
export const EFFECT_UNKNOWN = "effect_unknown";

/** The tool of a pending irreversible call sent with an outcome not known (unsettled, or waiting for a human to settle it). */
export function unsettledTool(s: SessionRecord): string | undefined {
  const pending = pendingOf(s);
  if (!pending.call) return undefined;
  return pending.unsettled || pending.approval?.kind === "outcome_unknown" ? pending.call.tool : undefined;
}
export const NOT_AS_ASKED = "not_as_asked";

/** The outcomes whose reason names the tools (by their model-visible names) behind them, with the kind of each. */
export const TOOL_NAMED_REASONS = {
  [EFFECT_UNKNOWN]: "not_done",
  no_effect: "not_done",
  degraded: "partial",
  tool_failed: "partial",
} as const satisfies Record<string, Outcome["kind"]>;

/** An outcome whose reason names `tools`. */
function toolNamed(reason: keyof typeof TOOL_NAMED_REASONS, tools: Iterable<string>): Outcome {
  return { kind: TOOL_NAMED_REASONS[reason], reason: `${reason}: ${[...tools].join(", ")}` };
}

/** An outcome's reason as a metric label: without the words after its kind where they are unbounded (the policy's, amounts and ids). */
export function reasonLabel(reason: string): string {
  return [LOW_CONFIDENCE, NOT_AS_ASKED].find((kind) => reason.startsWith(`${kind}:`)) ?? reason;
}

/** How the effects of `a.tool` differ from what the task asked, in words a user reads; undefined when they match. */
function notAsAsked(a: AskedEffect, effects: readonly EffectRecord[]): string | undefined {
  const made = effects.filter((e) => e.tool === a.tool);
  const moved = new Map<string, number | undefined>(a.entityIds.map((id) => [id, undefined]));
  for (const e of made) moved.set(e.entityId, (moved.get(e.entityId) ?? 0) + e.amount);
  const total = made.reduce((sum, e) => sum + e.amount, 0);
  const untouched = [...moved.values()].includes(undefined);
  if (!untouched && (a.figure === undefined || total === a.figure)) return undefined;
  // More than asked is kept from happening by the guards; were it made, it is not what was asked either.
  const figure =
    a.figure === undefined
      ? ""
      : total > a.figure
        ? `, more than the ${a.figure} ${a.field} asked for`
        : ` of the ${a.figure} ${a.field} asked for`;
  const each = [...moved].map(([id, amount]) => `${a.entity} ${id}: ${amount ?? "none"}`);
  return `${a.tool} moved ${total}${figure} (${each.join(", ")})`;
}

/**
 * The outcome of an ended session; undefined while it runs. `confidenceThreshold`: an answer to a
 * question given with less is partial (a task that asked for an effect is judged by the effect).
 */
export function outcomeOf(s: SessionRecord, rules: SideEffectRules, confidenceThreshold = 0): Outcome | undefined {
  if (!isTerminal(s.state)) return undefined;
  const unknown = unsettledTool(s);
  if (unknown) return toolNamed(EFFECT_UNKNOWN, [unknown]);
  // A task that asks for an effect succeeded when the effect was made as asked, however the session
  // ended after it: on every entity the task names, adding up to its figure (a cent of 50.00 is partial).
  const asked = rules.askedFor(s.task);
  if (asked.length > 0) {
    const effects = effectsOf(s);
    const missing = asked.filter((a) => !effects.some((e) => e.tool === a.tool)).map((a) => a.tool);
    if (missing.length === 0) {
      const unlike = asked.map((a) => notAsAsked(a, effects)).filter((why) => why !== undefined);
      if (unlike.length === 0) return { kind: "succeeded", reason: "" };
      return { kind: "partial", reason: `${NOT_AS_ASKED}: ${unlike.join("; ")}` };
    }
    if (s.stopReason === "done") return toolNamed("no_effect", missing);
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
  if (tried.size > 0) return toolNamed("no_effect", tried);
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
    else if (!item.envelope.ok && toolFailed(item.envelope.error?.code ?? "")) failed.add(item.tool);
  }
  if (degraded.size > 0) return toolNamed("degraded", degraded);
  if (failed.size > 0) return toolNamed("tool_failed", failed);
  const low = asked.length === 0 ? belowThreshold(contextOf(s).answerConfidence, confidenceThreshold) : undefined;
  if (low) return { kind: "partial", reason: `${LOW_CONFIDENCE}: ${low}` };
  return { kind: "succeeded", reason: "" };
}
