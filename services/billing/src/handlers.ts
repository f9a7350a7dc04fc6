// BillingService handlers: translate between the contract's messages and the RefundLedger, and
// the ledger's refusals into the contract's error reasons. Validation (the contract's rules and
// refundViolations), auth and deadlines are done by the tool-sdk before a handler runs.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  type BillingService,
  OrderStatus,
  type OrderSchema,
  type RefundRequest,
  type RefundSchema,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { type Caller, redactText, type RuleViolation, status, type ToolHandlers, ToolError } from "@loopguard/tool-sdk";
import type { Clock } from "./clock.js";
import { LedgerError, type OrderRecord, type OrderState, type RefundLedger, type RefundRecord } from "./ledger.js";
import { pageAfter, pageToken } from "./page-token.js";

export interface BillingDeps {
  readonly ledger: RefundLedger;
  readonly clock: Clock;
}

/** How long a caller should wait before retrying when the ledger is locked or failing. */
export const LEDGER_RETRY_AFTER_MS = 250;

const ORDER_STATUS: Record<OrderState, OrderStatus> = {
  PENDING: OrderStatus.PENDING,
  PAID: OrderStatus.PAID,
  CANCELLED: OrderStatus.CANCELLED,
  REFUNDED: OrderStatus.REFUNDED,
};

function orderMessage(order: OrderRecord): MessageInitShape<typeof OrderSchema> {
  return {
    orderId: order.orderId,
    customerId: order.customerId,
    status: ORDER_STATUS[order.state],
    amountPaidCents: BigInt(order.amountPaidCents),
    amountRefundedCents: BigInt(order.amountRefundedCents),
    refundableCents: BigInt(order.refundableCents),
    currency: order.currency,
    createdAt: timestampFromMs(order.createdAt.getTime()),
    version: BigInt(order.version),
  };
}

function refundMessage(refund: RefundRecord): MessageInitShape<typeof RefundSchema> {
  return {
    refundId: refund.refundId,
    orderId: refund.orderId,
    amountCents: BigInt(refund.amountCents),
    reason: refund.reason,
    createdAt: timestampFromMs(refund.createdAt.getTime()),
  };
}

const LEDGER_ERROR_CODES: Record<LedgerError["reason"], status> = {
  ORDER_NOT_FOUND: status.NOT_FOUND,
  ORDER_NOT_REFUNDABLE: status.FAILED_PRECONDITION,
  // A key stands for one refund forever: its reuse for another refund conflicts with what exists.
  IDEMPOTENCY_KEY_REUSED: status.ALREADY_EXISTS,
  LEDGER_UNAVAILABLE: status.UNAVAILABLE,
  // The caller decided on an older figure: nothing was done, and it may decide again.
  BOUND_EXCEEDED: status.FAILED_PRECONDITION,
  // Retried with the same key, by the client within the call or by whoever re-sends it.
  OUTCOME_UNKNOWN: status.UNAVAILABLE,
};

function toToolError(error: unknown): unknown {
  if (!(error instanceof LedgerError)) return error;
  return new ToolError(LEDGER_ERROR_CODES[error.reason], error.reason, error.message, {
    cause: error,
    ...(error.reason === "LEDGER_UNAVAILABLE" || error.reason === "OUTCOME_UNKNOWN"
      ? { retryAfterMs: LEDGER_RETRY_AFTER_MS }
      : {}),
  });
}

/**
 * Refund's `validate` hook, run beside the contract's rules: the orchestrator's refund always
 * carries the host's bound, and one without is refused, never run unbounded.
 */
export function refundViolations(request: RefundRequest, caller: Caller): RuleViolation[] {
  if (caller.role === "break-glass" || request.maxRefundedTotalCents !== 0n) return [];
  const description =
    "a refund needs the caller's bound on the order's refunded total; only a break-glass refund may go without one";
  return [{ field: "max_refunded_total_cents", description, reason: "bound.required" }];
}

function orderNotFound(orderId: string): ToolError {
  return new ToolError(status.NOT_FOUND, "ORDER_NOT_FOUND", `order ${orderId} does not exist`);
}

/** Runs ledger work, turning its refusals into wire errors. */
async function withLedger<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw toToolError(error);
  }
}

export function createBillingHandlers({ ledger, clock }: BillingDeps): ToolHandlers<typeof BillingService> {
  return {
    async getOrder(request) {
      const order = await withLedger(() => ledger.getOrder(request.orderId));
      if (!order) throw orderNotFound(request.orderId);
      return { order: orderMessage(order) };
    },

    async refund(request, { caller, log, signal }) {
      const breakGlass = caller.role === "break-glass";
      if (breakGlass)
        log.warn("break-glass refund", { caller: caller.subject, kids: [caller.keyId], order_id: request.orderId });
      const outcome = await withLedger(() =>
        ledger.refund({
          orderId: request.orderId,
          // Validated to 1..500000 before the handler runs, so the conversion is exact.
          amountCents: Number(request.amountCents),
          reason: request.reason,
          idempotencyKey: request.idempotencyKey,
          maxRefundedTotalCents: Number(request.maxRefundedTotalCents),
          at: clock.now(),
          dryRun: request.dryRun,
          signal,
          ...(breakGlass
            ? {
                breakGlass: {
                  subject: caller.subject,
                  keyId: caller.keyId,
                  reason: redactText(caller.breakGlassReason ?? ""),
                },
              }
            : {}),
        }),
      );
      return {
        refund: refundMessage(outcome.refund),
        replayed: outcome.replayed,
        orderRefundableCents: BigInt(outcome.orderRefundableCents),
        dryRun: outcome.dryRun === true,
      };
    },

    async listRefunds(request) {
      const after = pageAfter(request.pageToken, request.orderId);
      const page = await withLedger(() =>
        ledger.listRefunds(request.orderId, {
          ...(after === undefined ? {} : { after }),
          ...(request.pageSize === 0 ? {} : { size: request.pageSize }),
        }),
      );
      if (!page) throw orderNotFound(request.orderId);
      return {
        refunds: page.refunds.map(refundMessage),
        nextPageToken: page.next === undefined ? "" : pageToken(request.orderId, page.next),
      };
    },
  };
}
