// Refund's promises over a real server: replay, refused key reuse, one execution under
// concurrency, and preconditions that leave nothing written when they fail.
import { join } from "node:path";
import Database from "better-sqlite3";
import { refusal } from "@loopguard/test-kit";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { withBoundTokens } from "@loopguard/tool-sdk/testing";
import { CallError, status } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { LEDGER_RETRY_AFTER_MS } from "../src/handlers.js";
import { NO_ORDER_REACHES, refundOf, startBilling, useBilling } from "./billing-fixture.js";

const suite = useBilling(["billing:refund", "billing:read"]);

describe("Refund", () => {
  it("replays the first result for the same key and parameters and writes one row", async () => {
    const request = refundOf("ord_DEMO00000001", 1000n, "rules-replay-0000001");
    const first = await suite.client.refund(request);
    const again = await suite.client.refund(request);
    expect(first.replayed).toBe(false);
    expect(again.replayed).toBe(true);
    expect(again.refund).toEqual(first.refund);
    expect(again.orderRefundableCents).toBe(first.orderRefundableCents);
    expect(suite.billing.refunds({ key: request.idempotencyKey })).toHaveLength(1);
    expect(suite.billing.order("ord_DEMO00000001")).toMatchObject({ amount_refunded_cents: 1000, version: 2 });
  });

  it.each([
    ["another amount", { amountCents: 1001n }],
    ["another reason", { reason: RefundReason.WRONG_ITEM }],
    ["another order", { orderId: "ord_DEMO00000008" }],
  ])("refuses the key reused with %s (IDEMPOTENCY_KEY_REUSED) and writes nothing", async (_, change) => {
    const request = refundOf("ord_DEMO00000002", 1000n, `rules-reuse-${Object.keys(change)[0]}`);
    await suite.client.refund(request);
    const rowsBefore = suite.billing.refunds();
    const ordersBefore = [suite.billing.order("ord_DEMO00000002"), suite.billing.order("ord_DEMO00000008")];
    const error = await refusal(suite.client.refund({ ...request, ...change }), CallError);
    expect(error.code).toBe(status.ALREADY_EXISTS);
    expect(error.reason).toBe("IDEMPOTENCY_KEY_REUSED");
    expect(suite.billing.refunds()).toEqual(rowsBefore);
    expect([suite.billing.order("ord_DEMO00000002"), suite.billing.order("ord_DEMO00000008")]).toEqual(ordersBefore);
  });

  it("executes 50 concurrent calls with one key once, and all answer with the same refund", async () => {
    const request = refundOf("ord_DEMO00000008", 700n, "rules-concurrent-0000001", RefundReason.NOT_DELIVERED);
    const before = suite.billing.order("ord_DEMO00000008")!;
    const responses = await Promise.all(Array.from({ length: 50 }, () => suite.client.refund(request)));
    expect(new Set(responses.map((r) => r.refund?.refundId)).size).toBe(1);
    expect(responses.filter((r) => !r.replayed)).toHaveLength(1);
    expect(suite.billing.refunds({ key: request.idempotencyKey })).toHaveLength(1);
    expect(suite.billing.order("ord_DEMO00000008")).toMatchObject({
      amount_refunded_cents: before.amount_refunded_cents + 700,
      version: before.version + 1,
    });
  });

  it("refuses more than is still refundable (ORDER_NOT_REFUNDABLE) and leaves order and rows unchanged", async () => {
    const before = suite.billing.order("ord_DEMO00000005");
    const rowsBefore = suite.billing.refunds();
    const error = await refusal(
      suite.client.refund(refundOf("ord_DEMO00000005", 5501n, "rules-over-refund-0001")),
      CallError,
    );
    expect(error.code).toBe(status.FAILED_PRECONDITION);
    expect(error.reason).toBe("ORDER_NOT_REFUNDABLE");
    expect(suite.billing.order("ord_DEMO00000005")).toEqual(before);
    expect(suite.billing.refunds()).toEqual(rowsBefore);
    const exact = await suite.client.refund(refundOf("ord_DEMO00000005", 5500n, "rules-exact-refund-0001"));
    expect(exact.orderRefundableCents).toBe(0n);
    expect(suite.billing.order("ord_DEMO00000005")).toMatchObject({ status: "REFUNDED", amount_refunded_cents: 8000 });
  });

  it.each([
    ["pending", "ord_DEMO00000003"],
    ["cancelled", "ord_DEMO00000004"],
    ["fully refunded", "ord_DEMO00000006"],
  ])("refuses a %s order (ORDER_NOT_REFUNDABLE)", async (_, orderId) => {
    const before = suite.billing.order(orderId);
    const error = await refusal(
      suite.client.refund({
        orderId,
        amountCents: 1n,
        reason: RefundReason.CUSTOMER_REQUEST,
        idempotencyKey: `rules-unpaid-${orderId}`,
        maxRefundedTotalCents: NO_ORDER_REACHES,
      }),
      CallError,
    );
    expect(error.code).toBe(status.FAILED_PRECONDITION);
    expect(error.reason).toBe("ORDER_NOT_REFUNDABLE");
    expect(suite.billing.order(orderId)).toEqual(before);
    expect(suite.billing.refunds({ key: `rules-unpaid-${orderId}` })).toEqual([]);
  });

  it("answers NOT_FOUND (ORDER_NOT_FOUND) for an unknown order on every method", async () => {
    const orderId = "ord_NOSUCHORDER1";
    const refund = await refusal(
      suite.client.refund({
        orderId,
        amountCents: 1n,
        reason: RefundReason.DAMAGED,
        idempotencyKey: "rules-unknown-order-0001",
        maxRefundedTotalCents: NO_ORDER_REACHES,
      }),
      CallError,
    );
    const get = await refusal(suite.client.getOrder({ orderId }), CallError);
    const list = await refusal(suite.client.listRefunds({ orderId }), CallError);
    expect([refund, get, list].map((e) => [e.code, e.reason])).toEqual(
      Array(3).fill([status.NOT_FOUND, "ORDER_NOT_FOUND"]),
    );
    expect(suite.billing.refunds({ key: "rules-unknown-order-0001" })).toEqual([]);
  });
});

describe("a locked ledger", () => {
  it("answers UNAVAILABLE (LEDGER_UNAVAILABLE) with a retry delay, and the retry with the same key succeeds", async () => {
    const locked = await startBilling({ lockTimeoutMs: 50 });
    const holder = new Database(join(locked.dir, "billing.db"));
    try {
      const lockedClient = withBoundTokens(BillingService, await locked.tool.client(["billing:refund"]));
      const request = refundOf("ord_DEMO00000001", 100n, "rules-locked-ledger-0001");
      holder.exec("BEGIN IMMEDIATE");
      const error = await refusal(lockedClient.refund(request), CallError);
      expect([error.code, error.reason, error.retryAfterMs]).toEqual([
        status.UNAVAILABLE,
        "LEDGER_UNAVAILABLE",
        LEDGER_RETRY_AFTER_MS,
      ]);
      holder.exec("ROLLBACK");
      expect(locked.refunds({ key: request.idempotencyKey })).toEqual([]);
      expect((await lockedClient.refund(request)).replayed).toBe(false);
      expect(locked.refunds({ key: request.idempotencyKey })).toHaveLength(1);
    } finally {
      holder.close();
      await locked.close();
    }
  });

  it("waits for the lock within Refund's 2 s SLA without stopping the process: reads answer meanwhile", async () => {
    const locked = await startBilling();
    const holder = new Database(join(locked.dir, "billing.db"));
    try {
      const client = withBoundTokens(BillingService, await locked.tool.client(["billing:refund", "billing:read"]));
      holder.exec("BEGIN IMMEDIATE");
      const started = performance.now();
      const refund = refusal(client.refund(refundOf("ord_DEMO00000001", 100n, "rules-locked-ledger-0002")), CallError);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const read = await client.getOrder({ orderId: "ord_DEMO00000002" }, { deadline: 500 });
      const readAfter = performance.now() - started;
      const error = await refund;
      const refusedAfter = performance.now() - started;
      expect(read.order?.orderId).toBe("ord_DEMO00000002");
      expect(readAfter).toBeLessThan(600);
      expect([error.code, error.reason]).toEqual([status.UNAVAILABLE, "LEDGER_UNAVAILABLE"]);
      expect(refusedAfter).toBeGreaterThanOrEqual(900);
      expect(refusedAfter).toBeLessThan(2000);
      holder.exec("ROLLBACK");
      expect(locked.refunds({ key: "rules-locked-ledger-0002" })).toEqual([]);
    } finally {
      holder.close();
      await locked.close();
    }
  });

  it("stops waiting for the lock when its caller's deadline passes: the lock freed later writes nothing", async () => {
    const locked = await startBilling();
    const holder = new Database(join(locked.dir, "billing.db"));
    try {
      const client = withBoundTokens(BillingService, await locked.tool.client(["billing:refund"]));
      const request = refundOf("ord_DEMO00000001", 100n, "rules-locked-ledger-0003");
      holder.exec("BEGIN IMMEDIATE");
      const error = await refusal(client.refund(request, { deadline: 200 }), CallError);
      expect(error.code).toBe(status.DEADLINE_EXCEEDED);
      // Freed after the deadline (the server's, a few ms after the client's, has passed too) and well
      // within the ledger's own 1 s lock timeout: a refund still waiting would now be made.
      await new Promise((resolve) => setTimeout(resolve, 100));
      holder.exec("ROLLBACK");
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(locked.refunds({ key: request.idempotencyKey })).toEqual([]);
      expect(locked.order("ord_DEMO00000001")).toMatchObject({ amount_refunded_cents: 0 });
    } finally {
      holder.close();
      await locked.close();
    }
  });
});
