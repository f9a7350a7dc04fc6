// The sessions a drill starts, all at once: refunds (most for low-risk customers, a few for
// high-risk ones that wait for a human's approval) and knowledge questions, over the demo data
// every billing, risk and kb-search pod seeds. Deterministic by index, so two runs of one drill
// offer the same work.
import type { JsonObject } from "@loopguard/orchestrator";

/** The scopes every drill session is granted: what the reference tasks need, nothing more. */
export const SESSION_SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"] as const;

export type SessionKind = "refund" | "question";

export interface PlannedSession {
  readonly index: number;
  readonly kind: SessionKind;
  /** A high-risk customer: the refund waits for approval by a second subject. */
  readonly needsApproval: boolean;
  /** StartSession's idempotency key: a start retried after a lost answer makes no second session. */
  readonly idempotencyKey: string;
  readonly goal: string;
  readonly task: JsonObject;
  /** Orders the session may refund (the ledger is audited on these). */
  readonly orderId: string | undefined;
}

/** The order ordinary refunds draw on: 450,000 cents paid. */
export const BULK_ORDER = "ord_DEMO00000002";
/**
 * The host asks for an approval from the risk of the order's own customer, and of the demo orders
 * a refund can be made on only ord_DEMO00000008's customer (cust_demo_0008, score 92) is at or
 * above the threshold. One high-risk refund per order at most: an approval is bound to the order's
 * version, so two approvals waiting on one order would make each other stale.
 */
const APPROVAL_ORDERS = ["ord_DEMO00000008"] as const;

const LOW_RISK = [
  { id_card: "110101198003121232", phone: "+8613800138000" },
  { id_card: "110101198507212349", phone: "+8613912345678" },
  { id_card: "11010119830405052X", phone: "+8615012345678" },
] as const;
const HIGH_RISK = [
  { id_card: "110101199810246781", phone: "+8617712345678" },
  { id_card: "110101199212084567", phone: "+8618612345678" },
] as const;

const REASONS = [
  ["DAMAGED", "it arrived damaged"],
  ["NOT_DELIVERED", "it never arrived"],
  ["WRONG_ITEM", "the wrong item was sent"],
  ["CUSTOMER_REQUEST", "the customer changed their mind"],
] as const;

const QUESTIONS = [
  "How long do card refunds take?",
  "Which refunds need an approval?",
  "What cannot be returned?",
  "How do I print a return label?",
  "What happens when a risk score cannot be computed?",
  "Can a customer get store credit instead of a refund?",
  "How are duplicate refunds prevented?",
  "What should an agent do about a chargeback?",
  "How is a customer's identity verified?",
  "When is a partial refund allowed?",
  "What if a delivery is late?",
  "How do gift cards work?",
] as const;

/** At most 50 cents each: a full run's refunds stay under 50,000 cents on the bulk order, where cumulative limits start asking for approval. */
function bulkAmount(index: number): number {
  return 10 + (index % 5) * 10;
}

export function planSessions(count: number, refundShare: number, runId: string): PlannedSession[] {
  const refunds = Math.round(count * refundShare);
  const approvals = Math.min(APPROVAL_ORDERS.length, Math.floor(refunds / 10));
  // Refunds and questions interleaved, so every moment of the load has both.
  const kinds: SessionKind[] = Array.from({ length: count }, (_, i) =>
    Math.floor(((i + 1) * refunds) / count) > Math.floor((i * refunds) / count) ? "refund" : "question",
  );
  let refundIndex = 0;
  return kinds.map((kind, index): PlannedSession => {
    const idempotencyKey = `drill-${runId}-${index}`;
    if (kind === "question") {
      const goal = QUESTIONS[index % QUESTIONS.length]!;
      const task: JsonObject =
        index % 4 === 3
          ? { kind: "question", subgoals: [QUESTIONS[(index + 5) % QUESTIONS.length]!] }
          : { kind: "question" };
      return { index, kind, needsApproval: false, idempotencyKey, goal, task, orderId: undefined };
    }
    const r = refundIndex++;
    const [reason, story] = REASONS[r % REASONS.length]!;
    // Approvals spread over the run: every (refunds / approvals)-th refund.
    const approval =
      approvals > 0 && r % Math.floor(refunds / approvals) === 0 && r / Math.floor(refunds / approvals) < approvals;
    const orderId = approval ? APPROVAL_ORDERS[r / Math.floor(refunds / approvals)]! : BULK_ORDER;
    const customer = approval ? HIGH_RISK[r % HIGH_RISK.length]! : LOW_RISK[r % LOW_RISK.length]!;
    const amountCents = approval ? 150 : bulkAmount(r);
    return {
      index,
      kind,
      needsApproval: approval,
      idempotencyKey,
      goal: `Refund ${(amountCents / 100).toFixed(2)} of order ${orderId}: ${story}`,
      task: { kind: "refund", order_id: orderId, amount_cents: amountCents, reason, ...customer },
      orderId,
    };
  });
}
