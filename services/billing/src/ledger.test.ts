import { describe, expect, it } from "vitest";
import { DEMO_ORDERS } from "./demo-orders.js";
import { refundRequestHash, seedRows } from "./ledger-rows.js";
import { decideRefund } from "./refund-decision.js";

describe("refundRequestHash", () => {
  it("hashes the order, amount and reason of a request", () => {
    expect(refundRequestHash("ord_DEMO00000001", 100, 1)).toBe(refundRequestHash("ord_DEMO00000001", 100, 1));
    expect(refundRequestHash("ord_DEMO00000001", 100, 1)).not.toBe(refundRequestHash("ord_DEMO00000001", 100, 2));
    expect(refundRequestHash("ord_DEMO00000001", 100, 1)).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe("decideRefund", () => {
  const { order } = seedRows(DEMO_ORDERS.find((o) => o.orderId === "ord_DEMO00000005")!);
  const command = {
    orderId: order.order_id,
    amountCents: 500,
    reason: 1,
    idempotencyKey: "unit-key-000000001",
    maxRefundedTotalCents: 0,
    at: new Date(0),
  };

  it("inserts a refund that fits, with what stays refundable after it", () => {
    const decision = decideRefund(command, undefined, order);
    expect("insert" in decision && decision.insert).toMatchObject({
      order_id: order.order_id,
      amount_cents: 500,
      refundable_after_cents: 5000,
    });
  });

  it("refuses a refund that would take the order's refunded total above the caller's bound, naming both figures", () => {
    expect(() => decideRefund({ ...command, maxRefundedTotalCents: 2999 }, undefined, order)).toThrow(
      expect.objectContaining({
        reason: "BOUND_EXCEEDED",
        message: expect.stringMatching(
          /would have 3000 refunded in total \(2500 already\), above the caller's bound of 2999/,
        ),
      }),
    );
    expect("insert" in decideRefund({ ...command, maxRefundedTotalCents: 3000 }, undefined, order)).toBe(true);
  });

  it("replays the earlier refund of the key, whatever the order looks like now", () => {
    const first = decideRefund(command, undefined, order);
    if (!("insert" in first)) throw new Error("expected an insert");
    expect(
      decideRefund({ ...command, maxRefundedTotalCents: 1 }, first.insert, { ...order, status: "REFUNDED" }),
    ).toEqual({
      replay: {
        refund: expect.objectContaining({ refundId: first.insert.refund_id }),
        replayed: true,
        orderRefundableCents: 5000,
      },
    });
  });
});

describe("seedRows", () => {
  it("derives an order's refunded total and version from its refunds", () => {
    const { order, refunds } = seedRows(DEMO_ORDERS.find((o) => o.orderId === "ord_DEMO00000006")!);
    expect(order).toMatchObject({ status: "REFUNDED", amount_refunded_cents: 2999, version: 2 });
    expect(refunds).toEqual([expect.objectContaining({ amount_cents: 2999, refundable_after_cents: 0 })]);
  });
});
