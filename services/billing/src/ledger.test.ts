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
  const { order, refunds } = seedRows(DEMO_ORDERS.find((o) => o.orderId === "ord_DEMO00000005")!);
  const locked = { ...order, refunds: refunds.length };
  const command = {
    orderId: order.order_id,
    amountCents: 500,
    reason: 1,
    idempotencyKey: "unit-key-000000001",
    maxRefundedTotalCents: 0,
    at: new Date(0),
  };

  it("inserts a refund that fits, with what stays refundable after it", () => {
    const decision = decideRefund(command, undefined, locked);
    expect("insert" in decision && decision.insert).toMatchObject({
      order_id: order.order_id,
      amount_cents: 500,
      refundable_after_cents: 5000,
    });
  });

  it("refuses a refund that would take the order's refunded total above the caller's bound, naming both figures", () => {
    expect(() => decideRefund({ ...command, maxRefundedTotalCents: 2999 }, undefined, locked)).toThrow(
      expect.objectContaining({
        reason: "BOUND_EXCEEDED",
        message: expect.stringMatching(
          /would have 3000 refunded in total \(2500 already\), above the caller's bound of 2999/,
        ),
      }),
    );
    expect("insert" in decideRefund({ ...command, maxRefundedTotalCents: 3000 }, undefined, locked)).toBe(true);
  });

  it("refuses a refund past the most refunds one order may have (ListRefunds has no paging), naming the count", () => {
    expect(() => decideRefund(command, undefined, { ...locked, refunds: 1000 })).toThrow(
      expect.objectContaining({
        reason: "ORDER_NOT_REFUNDABLE",
        message: `order ${order.order_id} has 1000 refunds, the most one order may have (ListRefunds shows every one); nothing was refunded`,
      }),
    );
    expect("insert" in decideRefund(command, undefined, { ...locked, refunds: 999 })).toBe(true);
  });

  it("replays the earlier refund of the key, whatever the order looks like now", () => {
    const first = decideRefund(command, undefined, locked);
    if (!("insert" in first)) throw new Error("expected an insert");
    expect(
      decideRefund({ ...command, maxRefundedTotalCents: 1 }, first.insert, { ...locked, status: "REFUNDED" }),
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
