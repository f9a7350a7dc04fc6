// The rows both databases store (integer cents, epoch milliseconds), their mapping to the
// ledger's records, and the rows that seed an order or audit a break-glass refund.
import { createHash } from "node:crypto";
import type {
  BreakGlassRow,
  OrderRecord,
  OrderState,
  RefundCommand,
  RefundPage,
  RefundRecord,
  SeedOrder,
} from "./ledger.js";

/** An order as both databases store it (integer cents, epoch milliseconds). */
export interface OrderRow {
  order_id: string;
  customer_id: string;
  status: OrderState;
  amount_paid_cents: number;
  amount_refunded_cents: number;
  currency: string;
  created_at: number;
  version: number;
}

/** A refund as both databases store it, without its idempotency key. */
export interface RefundRow {
  refund_id: string;
  order_id: string;
  amount_cents: number;
  reason: number;
  request_hash: string;
  refundable_after_cents: number;
  created_at: number;
}

export type NewRefundRow = RefundRow & { idempotency_key: string };

/** The audit row of a refund `decideRefund` chose to insert, when it was made under break-glass. */
export function breakGlassRow(command: RefundCommand, row: NewRefundRow): BreakGlassRow | undefined {
  const use = command.breakGlass;
  if (!use) return undefined;
  return {
    refund_id: row.refund_id,
    order_id: row.order_id,
    amount_cents: row.amount_cents,
    subject: use.subject,
    key_id: use.keyId,
    reason: use.reason,
    at: row.created_at,
  };
}

/** Fingerprint of what a refund request asks for; a key may only ever be used for one fingerprint. */
export function refundRequestHash(orderId: string, amountCents: number, reason: number): string {
  return createHash("sha256").update(`${orderId}|${amountCents}|${reason}`).digest("hex");
}

export function refundableOf(row: Pick<OrderRow, "status" | "amount_paid_cents" | "amount_refunded_cents">): number {
  return row.status === "PAID" ? row.amount_paid_cents - row.amount_refunded_cents : 0;
}

export function orderOf(row: OrderRow): OrderRecord {
  return {
    orderId: row.order_id,
    customerId: row.customer_id,
    state: row.status,
    amountPaidCents: row.amount_paid_cents,
    amountRefundedCents: row.amount_refunded_cents,
    refundableCents: refundableOf(row),
    currency: row.currency,
    createdAt: new Date(row.created_at),
    version: row.version,
  };
}

export function refundOf(row: RefundRow): RefundRecord {
  return {
    refundId: row.refund_id,
    orderId: row.order_id,
    amountCents: row.amount_cents,
    reason: row.reason,
    createdAt: new Date(row.created_at),
  };
}

/**
 * The page of `rows` (read with one row more than the page holds, after the cursor, in the order
 * made) and where the next one starts.
 */
export function refundPage(rows: readonly (RefundRow & { seq: number })[], size: number): RefundPage {
  const page = rows.slice(0, size);
  const last = page.at(-1);
  return {
    refunds: page.map(refundOf),
    ...(rows.length > size && last ? { next: last.seq } : {}),
  };
}

/** The rows that seed one order: its refunded total and version follow from its refunds. */
export function seedRows(order: SeedOrder): { order: OrderRow; refunds: NewRefundRow[] } {
  const refunds = order.refunds ?? [];
  let refundedSoFar = 0;
  const refundRows = refunds.map((refund): NewRefundRow => {
    refundedSoFar += refund.amountCents;
    return {
      refund_id: refund.refundId,
      order_id: order.orderId,
      amount_cents: refund.amountCents,
      reason: refund.reason,
      idempotency_key: refund.idempotencyKey,
      request_hash: refundRequestHash(order.orderId, refund.amountCents, refund.reason),
      refundable_after_cents: order.state === "PAID" ? order.amountPaidCents - refundedSoFar : 0,
      created_at: refund.createdAt.getTime(),
    };
  });
  return {
    order: {
      order_id: order.orderId,
      customer_id: order.customerId,
      status: order.state,
      amount_paid_cents: order.amountPaidCents,
      amount_refunded_cents: refundedSoFar,
      currency: order.currency,
      created_at: order.createdAt.getTime(),
      version: 1 + refunds.length,
    },
    refunds: refundRows,
  };
}
