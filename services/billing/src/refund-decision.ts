// What a refund may do, decided once for both backends as a pure function of the key's earlier
// refund and the order, both read under the backend's lock: replay, refuse, or insert this row.
import { randomInt } from "node:crypto";
import { LedgerError, type RefundCommand, type RefundOutcome } from "./ledger.js";
import {
  type NewRefundRow,
  type OrderRow,
  type RefundRow,
  refundableOf,
  refundOf,
  refundRequestHash,
} from "./ledger-rows.js";

const REFUND_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** rf_ + 16 random alphanumerics, the contract's refund id shape. */
export function newRefundId(): string {
  let id = "rf_";
  for (let i = 0; i < 16; i += 1) id += REFUND_ID_ALPHABET[randomInt(REFUND_ID_ALPHABET.length)];
  return id;
}

/** What a refund does: replay an earlier outcome, or insert this row and add its amount to the order. */
export type RefundDecision =
  | { readonly replay: RefundOutcome }
  | { readonly insert: NewRefundRow; readonly order: OrderRow };

/**
 * Decides a refund from the key's earlier refund and the order, both read under the backend's
 * lock; throws LedgerError for a refusal. The key comes first: a refund already made replays
 * whatever bound the repeat carries. A new one must keep the order's refunded total within the
 * caller's bound, checked here under the lock, so concurrent refunds within it all pass.
 */
export function decideRefund(
  command: RefundCommand,
  earlier: RefundRow | undefined,
  order: OrderRow | undefined,
): RefundDecision {
  const requestHash = refundRequestHash(command.orderId, command.amountCents, command.reason);
  if (earlier) {
    if (earlier.request_hash !== requestHash) {
      throw new LedgerError("IDEMPOTENCY_KEY_REUSED", "this idempotency key was used before for a different refund");
    }
    const replay = { refund: refundOf(earlier), replayed: true, orderRefundableCents: earlier.refundable_after_cents };
    // A dry run of a used key says what the call would do, a replay, and stays a dry run's answer:
    // dry_run set and an "rf_dryrun" id, never the stored refund's, so no caller records it as made.
    return { replay: command.dryRun ? { ...replay, refund: dryRunRefund(replay.refund), dryRun: true } : replay };
  }
  if (!order) throw new LedgerError("ORDER_NOT_FOUND", `order ${command.orderId} does not exist`);
  if (order.status !== "PAID") {
    throw new LedgerError(
      "ORDER_NOT_REFUNDABLE",
      `order ${command.orderId} is ${order.status.toLowerCase()}, not paid`,
    );
  }
  const refundable = refundableOf(order);
  if (command.amountCents > refundable) {
    throw new LedgerError(
      "ORDER_NOT_REFUNDABLE",
      `order ${command.orderId} has ${refundable} cents left to refund, less than the ${command.amountCents} asked`,
    );
  }
  const total = order.amount_refunded_cents + command.amountCents;
  if (command.maxRefundedTotalCents > 0 && total > command.maxRefundedTotalCents) {
    throw new LedgerError(
      "BOUND_EXCEEDED",
      `order ${command.orderId} would have ${total} refunded in total (${order.amount_refunded_cents} already), above the caller's bound of ${command.maxRefundedTotalCents}; nothing was refunded`,
    );
  }
  return {
    order,
    insert: {
      refund_id: newRefundId(),
      order_id: command.orderId,
      amount_cents: command.amountCents,
      reason: command.reason,
      idempotency_key: command.idempotencyKey,
      request_hash: requestHash,
      refundable_after_cents: refundable - command.amountCents,
      created_at: command.at.getTime(),
    },
  };
}

/**
 * What a dry run answers for a refund `decideRefund` chose to insert, with nothing written: the
 * refund as it would be, under an id that says so ("rf_dryrun…", never stored, so never found).
 */
export function dryRunOutcome(row: NewRefundRow): RefundOutcome {
  return {
    refund: dryRunRefund(refundOf(row)),
    replayed: false,
    orderRefundableCents: row.refundable_after_cents,
    dryRun: true,
  };
}

/** A refund as a dry run names it: under an id that says so. */
function dryRunRefund(refund: RefundOutcome["refund"]): RefundOutcome["refund"] {
  return { ...refund, refundId: `rf_dryrun${refund.refundId.slice(-10)}` };
}

/** The outcome of a refund `decideRefund` chose to insert, once written. */
export function insertedOutcome(row: NewRefundRow): RefundOutcome {
  return { refund: refundOf(row), replayed: false, orderRefundableCents: row.refundable_after_cents };
}
