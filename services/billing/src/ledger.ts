// RefundLedger: orders and their refunds, on SQLite (one process) or PostgreSQL (several
// replicas). What a refund may do is decided here once, for both: the same idempotency key with
// the same parameters replays the first result, with other parameters is refused, and a new
// refund needs a paid order with enough left. Each backend only reads the key's earlier refund
// and the order inside its transaction, under its lock, and writes what `decideRefund` returns.
import { createHash, randomInt } from "node:crypto";

/** Order states as stored; "partially refunded" is PAID with amount_refunded_cents > 0. */
export type OrderState = "PENDING" | "PAID" | "CANCELLED" | "REFUNDED";

export interface OrderRecord {
  readonly orderId: string;
  readonly customerId: string;
  readonly state: OrderState;
  readonly amountPaidCents: number;
  readonly amountRefundedCents: number;
  /** What may still be refunded: the unrefunded rest of a PAID order, otherwise 0. */
  readonly refundableCents: number;
  readonly currency: string;
  readonly createdAt: Date;
  readonly version: number;
}

export interface RefundRecord {
  readonly refundId: string;
  readonly orderId: string;
  readonly amountCents: number;
  /** RefundReason enum number, as the request carried it. */
  readonly reason: number;
  readonly createdAt: Date;
}

export interface RefundCommand {
  readonly orderId: string;
  readonly amountCents: number;
  readonly reason: number;
  readonly idempotencyKey: string;
  /** The most the order may have refunded in total once this refund is made; 0: no bound (a break-glass refund). */
  readonly maxRefundedTotalCents: number;
  readonly at: Date;
  /** Made by a person under break-glass: recorded with the refund, in the same transaction. */
  readonly breakGlass?: BreakGlassUse;
  /** Decide exactly as for a real refund (same refusals), then write nothing: see dryRunOutcome. */
  readonly dryRun?: boolean;
}

/** Who used break-glass for a refund, with which key, and why (their own words, personal data masked). */
export interface BreakGlassUse {
  readonly subject: string;
  readonly keyId: string;
  readonly reason: string;
}

/** A break-glass refund as the ledger audits it. */
export interface BreakGlassRow {
  refund_id: string;
  order_id: string;
  amount_cents: number;
  subject: string;
  key_id: string;
  reason: string;
  at: number;
}

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

export interface RefundOutcome {
  readonly refund: RefundRecord;
  /** True when the key was used before with the same parameters and nothing new was written. */
  readonly replayed: boolean;
  /** What was still refundable on the order right after this refund was first made (a dry run: would be). */
  readonly orderRefundableCents: number;
  /** True when nothing was written because the command was a dry run. */
  readonly dryRun?: boolean;
}

export type LedgerErrorReason =
  | "ORDER_NOT_FOUND"
  | "ORDER_NOT_REFUNDABLE"
  | "IDEMPOTENCY_KEY_REUSED"
  | "LEDGER_UNAVAILABLE"
  | "BOUND_EXCEEDED";

/** A refusal from the ledger, named by the contract's BillingErrorReason (without prefix). */
export class LedgerError extends Error {
  override readonly name = "LedgerError";
  constructor(
    readonly reason: LedgerErrorReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface SeedRefund {
  readonly refundId: string;
  readonly amountCents: number;
  readonly reason: number;
  readonly idempotencyKey: string;
  readonly createdAt: Date;
}

/** An order to seed; its refunded total and version are derived from its refunds. */
export interface SeedOrder {
  readonly orderId: string;
  readonly customerId: string;
  readonly state: OrderState;
  readonly amountPaidCents: number;
  readonly currency: string;
  readonly createdAt: Date;
  readonly refunds?: readonly SeedRefund[];
}

export interface RefundLedger {
  /** Names of the schema migrations opening this ledger applied (empty when it was current). */
  readonly migrationsApplied: readonly string[];
  /** Inserts the orders (and their refunds) that are not there yet; existing ones are left alone, even by concurrent seeders. */
  seed(orders: readonly SeedOrder[]): Promise<void>;
  getOrder(orderId: string): Promise<OrderRecord | undefined>;
  /** Every refund made under break-glass, oldest first, with who made it and why. */
  breakGlassRefunds(): Promise<BreakGlassRow[]>;
  /** The order's refunds, oldest first; undefined when there is no such order. */
  listRefunds(orderId: string): Promise<RefundRecord[] | undefined>;
  /**
   * Refunds `amountCents` of a paid order once per idempotency key. Rejects with LedgerError
   * (ORDER_NOT_FOUND, ORDER_NOT_REFUNDABLE, IDEMPOTENCY_KEY_REUSED, LEDGER_UNAVAILABLE); on any
   * rejection nothing was written.
   */
  refund(command: RefundCommand): Promise<RefundOutcome>;
  close(): Promise<void>;
}

/**
 * The contract's ListRefundsResponse holds at most 1000 refunds and has no paging; an order with
 * more lists its oldest 1000.
 */
export const MAX_LISTED_REFUNDS = 1000;

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

const REFUND_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** rf_ + 16 random alphanumerics, the contract's refund id shape. */
export function newRefundId(): string {
  let id = "rf_";
  for (let i = 0; i < 16; i += 1) id += REFUND_ID_ALPHABET[randomInt(REFUND_ID_ALPHABET.length)];
  return id;
}

/** Fingerprint of what a refund request asks for; a key may only ever be used for one fingerprint. */
export function refundRequestHash(orderId: string, amountCents: number, reason: number): string {
  return createHash("sha256").update(`${orderId}|${amountCents}|${reason}`).digest("hex");
}

function refundableOf(row: Pick<OrderRow, "status" | "amount_paid_cents" | "amount_refunded_cents">): number {
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
    return {
      replay: { refund: refundOf(earlier), replayed: true, orderRefundableCents: earlier.refundable_after_cents },
    };
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
    refund: refundOf({ ...row, refund_id: `rf_dryrun${row.refund_id.slice(-10)}` }),
    replayed: false,
    orderRefundableCents: row.refundable_after_cents,
    dryRun: true,
  };
}

/** The outcome of a refund `decideRefund` chose to insert, once written. */
export function insertedOutcome(row: NewRefundRow): RefundOutcome {
  return { refund: refundOf(row), replayed: false, orderRefundableCents: row.refundable_after_cents };
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
