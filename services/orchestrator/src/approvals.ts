// The approval gate: irreversible actions above an amount, for a risky (or unscored) customer,
// or decided with low confidence wait for a human. An approval is bound to the exact tool,
// argument hash and world version, and expires.
import { randomUUID } from "node:crypto";
import { Effect } from "@loopguard/tool-sdk";
import type { HistoryItem } from "./policy.js";
import type { JsonObject } from "./session-store.js";
import type { RegisteredTool } from "./tool-registry.js";

export interface ApprovalRules {
  /** Irreversible actions moving more than this many cents need approval. */
  readonly amountThresholdCents: number;
  /** A customer risk score at or above this (or one that could not be computed) needs approval. */
  readonly riskThreshold: number;
  /** Policy confidence below this sends irreversible actions to approval. */
  readonly minConfidence: number;
  readonly ttlMs: number;
}

export const DEFAULT_APPROVAL_RULES: ApprovalRules = Object.freeze({
  amountThresholdCents: 50_000,
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
  readonly [key: string]: string | number;
}

/** The latest customer risk score observed in this session: a number, -1 (not computable), "failed", or undefined. */
export function observedRisk(history: readonly HistoryItem[]): number | "failed" | undefined {
  for (let i = history.length - 1; i >= 0; i -= 1) {
    const item = history[i]!;
    if (item.kind !== "observation" || item.tool !== "risk_query_risk") continue;
    if (!item.envelope.ok) return "failed";
    const score = (item.envelope.data as JsonObject | undefined)?.riskScore;
    return typeof score === "number" ? score : 0;
  }
  return undefined;
}

/** Why this call needs a human's approval, or undefined. */
export function approvalReason(
  tool: RegisteredTool,
  args: JsonObject,
  history: readonly HistoryItem[],
  confidence: number | undefined,
  rules: ApprovalRules,
): string | undefined {
  if (tool.effect !== Effect.IRREVERSIBLE_EXTERNAL) return undefined;
  const amount = Number(args.amountCents ?? 0);
  if (amount > rules.amountThresholdCents) return `amount ${amount} cents is above the approval threshold of ${rules.amountThresholdCents}`;
  const risk = observedRisk(history);
  if (risk === "failed") return "the customer's risk score could not be obtained";
  if (risk === -1) return "the customer's risk score could not be computed";
  if (risk !== undefined && risk >= rules.riskThreshold) return `customer risk score ${risk} is at or above ${rules.riskThreshold}`;
  if (confidence !== undefined && confidence < rules.minConfidence) return `policy confidence ${confidence} is below ${rules.minConfidence}`;
  return undefined;
}

export function newApproval(tool: string, argumentsHash: string, worldVersion: string, reason: string, now: number, rules: ApprovalRules): PendingApproval {
  return { approvalId: `apr_${randomUUID().replace(/-/g, "").slice(0, 20)}`, tool, argumentsHash, worldVersion, reason, expiresAt: now + rules.ttlMs };
}
