// Random requests over a real server: whatever arrives, the answer is OK, INVALID_ARGUMENT or
// one of the method's domain errors — never INTERNAL — and the ledger stays consistent.
import type { RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { CallError, status } from "@loopguard/tool-sdk";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DEMO_ORDERS } from "../src/demo-orders.js";
import { NO_ORDER_REACHES, useBilling } from "./billing-fixture.js";

const RUNS = 1000;

const suite = useBilling(["billing:refund", "billing:read"]);

const ALPHANUMERIC = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".split("");
const KEY_CHARS = [...ALPHANUMERIC, "_", ".", ":", "-"];

const orderId = fc.oneof(
  fc.constantFrom(...DEMO_ORDERS.map((o) => o.orderId)),
  fc.string({ unit: fc.constantFrom(...ALPHANUMERIC), minLength: 12, maxLength: 12 }).map((s) => `ord_${s}`),
  fc.string({ maxLength: 24 }),
);

const amountCents = fc.oneof(
  fc.bigInt(1n, 500n),
  fc.bigInt(-1000n, 600_000n),
  fc.constantFrom(0n, 1n, 500_000n, 500_001n),
);

// A small pool of valid keys, so that replays and reuse with other parameters happen often.
const keyPool = Array.from({ length: 40 }, (_, i) => `property-key-${String(i).padStart(4, "0")}`);
const idempotencyKey = fc.oneof(
  fc.constantFrom(...keyPool),
  fc.string({ unit: fc.constantFrom(...KEY_CHARS), minLength: 16, maxLength: 64 }),
  fc.string({ maxLength: 70 }),
);

/** "OK", or the status code name and ErrorInfo reason of the failure, e.g. "NOT_FOUND ORDER_NOT_FOUND". */
async function outcomeOf(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return "OK";
  } catch (error) {
    if (!(error instanceof CallError)) throw error;
    return `${status[error.code]} ${error.reason}`;
  }
}

const READ_OUTCOMES = ["OK", "INVALID_ARGUMENT REQUEST_INVALID", "NOT_FOUND ORDER_NOT_FOUND"];
const REFUND_OUTCOMES = [
  ...READ_OUTCOMES,
  "FAILED_PRECONDITION ORDER_NOT_REFUNDABLE",
  "ALREADY_EXISTS IDEMPOTENCY_KEY_REUSED",
];

describe("random requests", () => {
  it(`GetOrder: ${RUNS} requests never answer INTERNAL`, async () => {
    await fc.assert(
      fc.asyncProperty(orderId, async (id) => {
        expect(READ_OUTCOMES).toContain(await outcomeOf(suite.client.getOrder({ orderId: id })));
      }),
      { numRuns: RUNS },
    );
  });

  it(`ListRefunds: ${RUNS} requests never answer INTERNAL`, async () => {
    await fc.assert(
      fc.asyncProperty(orderId, async (id) => {
        expect(READ_OUTCOMES).toContain(await outcomeOf(suite.client.listRefunds({ orderId: id })));
      }),
      { numRuns: RUNS },
    );
  });

  it(`Refund: ${RUNS} requests never answer INTERNAL and keep every order's totals equal to its refunds`, async () => {
    const seen = new Set<string>();
    await fc.assert(
      fc.asyncProperty(
        orderId,
        amountCents,
        fc.integer({ min: 0, max: 7 }),
        idempotencyKey,
        async (id, amount, reason, key) => {
          const outcome = await outcomeOf(
            suite.client.refund({
              orderId: id,
              amountCents: amount,
              reason: reason as RefundReason,
              idempotencyKey: key,
              maxRefundedTotalCents: NO_ORDER_REACHES,
            }),
          );
          expect(REFUND_OUTCOMES).toContain(outcome);
          seen.add(outcome);
        },
      ),
      { numRuns: RUNS },
    );
    // The generators reach every outcome, so the property covered each path of the handler.
    expect([...seen].sort()).toEqual([...REFUND_OUTCOMES].sort());
    for (const { orderId: id } of DEMO_ORDERS) {
      const order = suite.billing.order(id)!;
      const refunded = suite.billing.refunds({ orderId: id }).reduce((sum, r) => sum + r.amount_cents, 0);
      expect(order.amount_refunded_cents).toBe(refunded);
      expect(refunded).toBeLessThanOrEqual(order.amount_paid_cents);
    }
    const keys = suite.billing.refunds().map((r) => r.idempotency_key);
    expect(new Set(keys).size).toBe(keys.length);
  });
});
