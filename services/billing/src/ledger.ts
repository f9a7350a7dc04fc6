// RefundLedger: orders and their refunds, on SQLite (one process) or PostgreSQL (several
// replicas): the records and commands both backends speak, and the errors they refuse with. What a
// refund may do is decided once, for both, in refund-decision.ts; the rows they store are in
// ledger-rows.ts.

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
  /** The call's signal: a refund still waiting for the ledger's lock when it aborts is not made, and fails with its reason. */
  readonly signal?: AbortSignal;
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
  | "BOUND_EXCEEDED"
  | "OUTCOME_UNKNOWN";

/**
 * A refusal from the ledger, named by the contract's BillingErrorReason (without prefix); or
 * OUTCOME_UNKNOWN, no refusal: the refund's COMMIT went out and its answer was lost.
 */
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

/**
 * Runs a backend's ledger work, turning what its database calls `unavailable` into
 * LEDGER_UNAVAILABLE (nothing was written), and what it calls a COMMIT sent without an answer into
 * OUTCOME_UNKNOWN.
 */
export async function guardLedger<T>(
  unavailable: (error: unknown) => boolean,
  work: () => T | Promise<T>,
  commitUnanswered: (error: unknown) => boolean = () => false,
): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (commitUnanswered(error))
      throw new LedgerError(
        "OUTCOME_UNKNOWN",
        "the ledger took the refund's commit and its answer was lost: it may have been made; send the same request with the same idempotency key again to learn",
        { cause: error },
      );
    if (unavailable(error))
      throw new LedgerError("LEDGER_UNAVAILABLE", "the refund ledger cannot be used right now", { cause: error });
    throw error;
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
  /**
   * One page of the order's refunds in the order billing made them (each order's refunds are made
   * one at a time, under its lock), from just after `after`; undefined when there is no such order.
   */
  listRefunds(orderId: string, page?: RefundPageRequest): Promise<RefundPage | undefined>;
  /**
   * Refunds `amountCents` of a paid order once per idempotency key. Rejects with LedgerError
   * (ORDER_NOT_FOUND, ORDER_NOT_REFUNDABLE, IDEMPOTENCY_KEY_REUSED, LEDGER_UNAVAILABLE,
   * BOUND_EXCEEDED: nothing was written), or OUTCOME_UNKNOWN (its commit went out unanswered: it may
   * have been made, and the same key settles it).
   */
  refund(command: RefundCommand): Promise<RefundOutcome>;
  close(): Promise<void>;
}

/** The most refunds one page holds: the contract's ListRefundsResponse max_items (billing-api.int.test.ts holds it to that). */
export const MAX_LISTED_REFUNDS = 1000;

export interface RefundPageRequest {
  /** The `seq` of the last refund of the page before; absent for the first page. */
  readonly after?: number;
  /** 1..MAX_LISTED_REFUNDS (the default). */
  readonly size?: number;
}

export interface RefundPage {
  readonly refunds: RefundRecord[];
  /** The `seq` of this page's last refund when more follow it; absent on the last page. */
  readonly next?: number;
}
