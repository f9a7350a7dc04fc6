// The approval gate's numbers, and the pending approval itself: an irreversible action waits for
// a human when its amounts (per entity, per customer and per session, in the entity's currency,
// held and made across every replica), the task's own figure, its customer's risk or the
// policy's confidence say so (decided in side-effect-guard.ts), or when its outcome could not be
// established. An approval is bound to the exact tool, argument hash and world version, and expires.
import { randomUUID } from "node:crypto";
import { z } from "zod";
import type { ApprovalField } from "@loopguard/tool-sdk";
import { DEFAULT_CONFIDENCE_THRESHOLD } from "./confidence.js";

/** Amounts, in a currency's minor units, above which a human approves. */
export interface AmountThresholds {
  /** The total moved on one entity: what its ledger says was moved, what calls in flight hold on it, and this call. */
  readonly entity: number;
  /** The total one session moves. */
  readonly session: number;
  /** The total one customer gets within the window, across entities and sessions. */
  readonly customer: number;
}

export interface ApprovalRules {
  /** Thresholds of a currency that has none of its own. */
  readonly amounts: AmountThresholds;
  /** Per ISO 4217 code, that currency's own thresholds; what one leaves out falls back to `amounts`. */
  readonly amountsByCurrency: Readonly<Record<string, Partial<AmountThresholds>>>;
  /** The customer total counts what was held or made within this window. */
  readonly customerWindowMs: number;
  /**
   * Per approval setting a contract declares (a response field's `(field).approval`): a value at or
   * above it needs approval. A setting left out holds its contract's default threshold.
   */
  readonly thresholds: Readonly<Record<string, number>>;
  /** CONFIDENCE_THRESHOLD: a policy confidence below it sends irreversible actions to approval and makes a question's answer partial. */
  readonly minConfidence: number;
  readonly ttlMs: number;
}

export const DEFAULT_APPROVAL_RULES: ApprovalRules = Object.freeze({
  amounts: Object.freeze({ entity: 50_000, session: 50_000, customer: 200_000 }),
  amountsByCurrency: Object.freeze({}),
  customerWindowMs: 24 * 3600_000,
  thresholds: Object.freeze({}),
  minConfidence: DEFAULT_CONFIDENCE_THRESHOLD,
  ttlMs: 15 * 60_000,
});

/** The threshold a declared approval field's value is compared with. */
export function thresholdOf(rules: ApprovalRules, field: ApprovalField): number {
  return rules.thresholds[field.setting] ?? field.defaultThreshold;
}

/** The thresholds amounts in `currency` are held to. */
export function thresholdsIn(rules: ApprovalRules, currency: string): AmountThresholds {
  return { ...rules.amounts, ...rules.amountsByCurrency[currency] };
}

/** The rules in one line, for the resolved configuration the orchestrator logs. */
export function describeApprovalRules(rules: ApprovalRules): string {
  const line = (t: Partial<AmountThresholds>) =>
    Object.entries(t)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
  const currencies = Object.entries(rules.amountsByCurrency).map(([code, t]) => `; ${code}: ${line(t)}`);
  const settings = Object.entries(rules.thresholds).map(([setting, t]) => `; ${setting} >= ${t}`);
  return `amounts above ${line(rules.amounts)} (customer over ${rules.customerWindowMs} ms)${currencies.join("")}${settings.join("")}; confidence < ${rules.minConfidence}; approvals expire after ${rules.ttlMs} ms`;
}

/** An approval a session waits for, as its pending state stores it and the API shows it. */
export const pendingApprovalSchema = z.object({
  approvalId: z.string(),
  tool: z.string(),
  argumentsHash: z.string(),
  worldVersion: z.string(),
  reason: z.string(),
  expiresAt: z.number(),
  /** "outcome_unknown": the call was sent and its outcome could not be established; approving re-sends it with the same key. "" otherwise. */
  kind: z.enum(["", "outcome_unknown"]),
});

export type PendingApproval = z.infer<typeof pendingApprovalSchema>;

export function newApproval(
  tool: string,
  argumentsHash: string,
  worldVersion: string,
  reason: string,
  now: number,
  rules: ApprovalRules,
  kind?: "outcome_unknown",
  until = Number.POSITIVE_INFINITY,
): PendingApproval {
  return {
    approvalId: `apr_${randomUUID().replace(/-/g, "").slice(0, 20)}`,
    tool,
    argumentsHash,
    worldVersion,
    reason,
    // `until`: the last moment an approval can still lead to the call (the session's wall clock).
    expiresAt: Math.min(now + rules.ttlMs, until),
    kind: kind ?? "",
  };
}
