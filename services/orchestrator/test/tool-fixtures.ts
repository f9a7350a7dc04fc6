// What the tests act on in the tools: the demo customers and refund tasks, the ledger read (and
// written behind billing's back), approvals answered, faults injected through the admin RPC.
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import Database from "better-sqlite3";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import type { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type FaultProfileSchema, ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import { testToken } from "@loopguard/tool-sdk/testing";
import type { Tools } from "./harness.js";

/** Every tool scope of the suite's three tools. */
export const ALL_SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"];

/** Demo customers of the risk service: score 5, and score 92 (at or above the approval threshold). */
export const LOW_RISK_CUSTOMER = { id_card: "110101198003121232", phone: "+8613800138000" };
export const HIGH_RISK_CUSTOMER = { id_card: "110101199810246781", phone: "+8617712345678" };
/** A refund task for the high-risk customer: it waits for an approval. */
export const HIGH_RISK_REFUND = {
  kind: "refund",
  order_id: "ord_DEMO00000008",
  amount_cents: 1000,
  reason: "DAMAGED",
  ...HIGH_RISK_CUSTOMER,
};

/** Starts a scripted refund session of `amountCents` of `orderId` for `customer`; its id. */
export async function startRefund(
  api: RawClient<typeof OrchestratorService>,
  orderId: string,
  amountCents: number,
  customer: Record<string, string>,
): Promise<string> {
  const { session } = await api.startSession({
    goal: `Refund ${(amountCents / 100).toFixed(2)} of ${orderId}`,
    task: { kind: "refund", order_id: orderId, amount_cents: amountCents, reason: "DAMAGED", ...customer } as never,
    scopes: ALL_SCOPES,
    policy: "scripted",
  });
  return session!.sessionId;
}

/** A ResolveApproval request that decides the approval a session `shown`, for the action it names. */
export function decisionOn(
  sessionId: string,
  shown: { approvalId: string; argumentsHash: string },
  approve: boolean,
  reason = "",
) {
  return { sessionId, approvalId: shown.approvalId, argumentsHash: shown.argumentsHash, approve, reason };
}

/** This run's refunds of `orderId` in the ledger, read with a client of its own. */
export async function refundsOf(tools: Tools, orderId: string) {
  const billing = createRawClient(BillingService, tools.billing.address, {
    token: await testToken({ subject: "test", scopes: ["billing:read"] }),
  });
  try {
    return (await billing.listRefunds({ orderId })).refunds;
  } finally {
    billing.close();
  }
}

/**
 * A refund another writer of billing's ledger made (straight into its SQLite file, not through
 * billing): the order's refunded total and its version move, as another system's refund moves them.
 */
export function refundElsewhere(tools: Pick<Tools, "dataDir">, orderId: string, cents: number): void {
  const ledger = new Database(join(tools.dataDir, "billing.db"));
  try {
    ledger.transaction(() => {
      const { left } = ledger
        .prepare("SELECT amount_paid_cents - amount_refunded_cents AS left FROM orders WHERE order_id = ?")
        .get(orderId) as { left: number };
      ledger
        .prepare(
          `INSERT INTO refunds (refund_id, order_id, amount_cents, reason, idempotency_key, request_hash, refundable_after_cents, created_at) VALUES (?, ?, ?, 1, ?, 'x', ?, ?)`,
        )
        .run("rf_ELSEWHERE0000001", orderId, cents, "made-elsewhere-0000001", left - cents, Date.now());
      ledger
        .prepare(
          "UPDATE orders SET amount_refunded_cents = amount_refunded_cents + ?, version = version + 1 WHERE order_id = ?",
        )
        .run(cents, orderId);
    })();
  } finally {
    ledger.close();
  }
}

/** Sets a tool's injected faults through its admin RPC (an empty profile clears them). */
export async function setFaults(
  tools: Tools,
  tool: string,
  profile: MessageInitShape<typeof FaultProfileSchema>,
): Promise<void> {
  const admin = createRawClient(ToolAdminService, tools.all[tool]!.address, {
    token: await testToken({ subject: "drill", audience: tool, scopes: ["tool:admin"] }),
  });
  try {
    await admin.setFaults({ profile });
  } finally {
    admin.close();
  }
}
