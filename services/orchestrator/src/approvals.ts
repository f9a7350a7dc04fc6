// The approval gate's numbers, and the pending approval itself: an irreversible action waits for
// a human when its amounts (cumulative per entity and per session), its customer's risk or the
// policy's confidence say so (decided in side-effect-guard.ts), or when its outcome could not be
// established. An approval is bound to the exact tool, argument hash and world version, and expires.
import { randomUUID } from "node:crypto";

export interface ApprovalRules {
  /** Above this total moved on one entity (earlier moves of any session included), a human approves. */
  readonly amountThresholdCents: number;
  /** Above this total moved by one session (over all entities), a human approves. */
  readonly sessionAmountThresholdCents: number;
  /** A customer risk score at or above this (or one that could not be computed) needs approval. */
  readonly riskThreshold: number;
  /** Policy confidence below this sends irreversible actions to approval. */
  readonly minConfidence: number;
  readonly ttlMs: number;
}

export const DEFAULT_APPROVAL_RULES: ApprovalRules = Object.freeze({
  amountThresholdCents: 50_000,
  sessionAmountThresholdCents: 50_000,
  riskThreshold: 70,
  minConfidence: 0.5,
  ttlMs: 15 * 60_000,
});

export interface PendingApproval {
  readonly approvalId: string;
  readonly tool: string;
  readonly argumentsHash: string;
  readonly worldVersion: string;
  readonly reason: string;
  readonly expiresAt: number;
  /** "outcome_unknown": the call was sent and its outcome could not be established; approving re-sends it with the same key. "" otherwise. */
  readonly kind: "" | "outcome_unknown";
  readonly [key: string]: string | number;
}

export function newApproval(tool: string, argumentsHash: string, worldVersion: string, reason: string, now: number, rules: ApprovalRules, kind?: "outcome_unknown"): PendingApproval {
  return {
    approvalId: `apr_${randomUUID().replace(/-/g, "").slice(0, 20)}`,
    tool,
    argumentsHash,
    worldVersion,
    reason,
    expiresAt: now + rules.ttlMs,
    kind: kind ?? "",
  };
}
