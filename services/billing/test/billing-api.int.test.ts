// Every method over a real server and client: valid requests, each validation rule broken
// alone, and auth.
import { join } from "node:path";
import { refusal } from "@loopguard/test-kit";
import { BillingService, OrderStatus, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { CallError, createRawClient, type RawClient, status } from "@loopguard/tool-sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withBoundTokens } from "@loopguard/tool-sdk/testing";
import { SqliteRefundLedger } from "../src/sqlite-ledger.js";
import { type BillingFixture, FIXED_NOW, startBilling, refundOf } from "./billing-fixture.js";

let billing: BillingFixture;
let reader: RawClient<typeof BillingService>;
let refunder: RawClient<typeof BillingService>;

beforeAll(async () => {
  billing = await startBilling();
  reader = await billing.tool.client(["billing:read"]);
  refunder = withBoundTokens(BillingService, await billing.tool.client(["billing:refund"]));
});

afterAll(async () => {
  await billing.close();
});

const validRefund = refundOf("ord_DEMO00000002", 1500n, "api-test-valid-refund-0001");

describe("valid requests", () => {
  it("GetOrder returns the order with what is refundable", async () => {
    const { order } = await reader.getOrder({ orderId: "ord_DEMO00000005" });
    expect(order).toMatchObject({
      orderId: "ord_DEMO00000005",
      customerId: "cust_demo_0005",
      status: OrderStatus.PAID,
      amountPaidCents: 8000n,
      amountRefundedCents: 2500n,
      refundableCents: 5500n,
      currency: "USD",
      version: 2n,
    });
    expect(order?.createdAt?.seconds).toBe(BigInt(Date.parse("2026-11-10T09:30:00Z") / 1000));
  });

  it("Refund refunds a paid order and GetOrder shows it", async () => {
    const response = await refunder.refund(validRefund);
    expect(response.replayed).toBe(false);
    expect(response.orderRefundableCents).toBe(448_500n);
    expect(response.refund).toMatchObject({
      orderId: "ord_DEMO00000002",
      amountCents: 1500n,
      reason: RefundReason.DAMAGED,
    });
    expect(response.refund?.refundId).toMatch(/^rf_[A-Za-z0-9]{16}$/);
    expect(response.refund?.createdAt?.seconds).toBe(BigInt(FIXED_NOW.getTime() / 1000));
    const { order } = await reader.getOrder({ orderId: "ord_DEMO00000002" });
    expect(order).toMatchObject({
      amountRefundedCents: 1500n,
      refundableCents: 448_500n,
      version: 2n,
      status: OrderStatus.PAID,
    });
    expect(billing.refunds({ key: validRefund.idempotencyKey })).toHaveLength(1);
  });

  it("ListRefunds lists an order's refunds oldest first", async () => {
    await refunder.refund(refundOf("ord_DEMO00000005", 500n, "api-test-list-refunds-0001", RefundReason.WRONG_ITEM));
    const { refunds } = await reader.listRefunds({ orderId: "ord_DEMO00000005" });
    expect(refunds.map((r) => [r.refundId.startsWith("rf_"), r.amountCents, r.reason])).toEqual([
      [true, 2500n, RefundReason.DAMAGED],
      [true, 500n, RefundReason.WRONG_ITEM],
    ]);
    expect(refunds[0]?.refundId).toBe("rf_DEMO000000000005");
  });

  it("ListRefunds of an order without refunds is empty", async () => {
    expect(await reader.listRefunds({ orderId: "ord_DEMO00000008" })).toMatchObject({
      refunds: [],
      nextPageToken: "",
    });
  });

  it("ListRefunds pages: each next_page_token gives the refunds after the page, the last page has none", async () => {
    const orderId = "ord_DEMO00000009";
    for (let i = 1; i <= 3; i++)
      await refunder.refund(refundOf(orderId, BigInt(i), `api-test-list-pages-000${i}`, RefundReason.DAMAGED));
    const whole = (await reader.listRefunds({ orderId })).refunds.map((r) => r.refundId);
    expect(whole).toHaveLength(3);
    const first = await reader.listRefunds({ orderId, pageSize: 2 });
    expect(first.refunds.map((r) => r.refundId)).toEqual(whole.slice(0, 2));
    expect(first.nextPageToken).toMatch(/^[A-Za-z0-9_-]+$/);
    const second = await reader.listRefunds({ orderId, pageSize: 2, pageToken: first.nextPageToken });
    expect(second.refunds.map((r) => r.refundId)).toEqual(whole.slice(2));
    expect(second.nextPageToken).toBe("");
  });

  it("ListRefunds of an order with 1,001 refunds: the contract's 1,000 (billing validates its answers), then the last one", async () => {
    const orderId = "ord_BULK00000001";
    const seeder = await SqliteRefundLedger.open(join(billing.dir, "billing.db"));
    await seeder.seed([
      {
        orderId,
        customerId: "cust_demo_0001",
        state: "PAID",
        amountPaidCents: 5_000,
        currency: "USD",
        createdAt: FIXED_NOW,
        refunds: Array.from({ length: 1001 }, (_, i) => ({
          refundId: `rf_BULK${String(i).padStart(12, "0")}`,
          amountCents: 1,
          reason: RefundReason.DAMAGED,
          idempotencyKey: `seed-bulk-refund-${String(i).padStart(4, "0")}`,
          createdAt: FIXED_NOW,
        })),
      },
    ]);
    await seeder.close();
    const first = await reader.listRefunds({ orderId });
    expect(first.refunds).toHaveLength(1000);
    const last = await reader.listRefunds({ orderId, pageToken: first.nextPageToken });
    expect(last).toMatchObject({ refunds: [{ refundId: "rf_BULK000000001000" }], nextPageToken: "" });
    expect(new Set([...first.refunds, ...last.refunds].map((r) => r.refundId)).size).toBe(1001);
  });

  it.each([
    ["a token of another order", () => pageOf("ord_DEMO00000005"), "pages through order ord_DEMO00000005, not"],
    [
      "a token not made by billing",
      () => Buffer.from("1.ord_DEMO00000009.x").toString("base64url"),
      "is not a page token",
    ],
    ["a token of another shape", () => "abc", "is not a page token"],
  ])("ListRefunds refuses %s: INVALID_ARGUMENT on page_token, nothing listed", async (_name, token, says) => {
    const error = await refusal(
      reader.listRefunds({ orderId: "ord_DEMO00000009", pageToken: await token() }),
      CallError,
    );
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => [v.field, v.description.includes(says)])).toEqual([["page_token", true]]);
  });
});

/** A real next_page_token of the order (it gets two refunds more when it has too few to page). */
async function pageOf(orderId: string): Promise<string> {
  const page = await reader.listRefunds({ orderId, pageSize: 1 });
  if (page.nextPageToken) return page.nextPageToken;
  for (const key of ["api-test-page-token-0001", "api-test-page-token-0002"])
    await refunder.refund(refundOf(orderId, 1n, key, RefundReason.DAMAGED));
  return (await reader.listRefunds({ orderId, pageSize: 1 })).nextPageToken;
}

describe("each validation rule broken alone is INVALID_ARGUMENT naming the field", () => {
  const badOrderIds = ["", "ord_short", "ORD_DEMO00000001", "ord_DEMO0000000!", "ord_DEMO000000012"];

  it.each(badOrderIds)("GetOrder order_id %j", async (orderId) => {
    const error = await refusal(reader.getOrder({ orderId }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("REQUEST_INVALID");
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["order_id"]);
  });

  it.each([
    ["page_size 1001", { pageSize: 1001 }, "page_size"],
    ["page_token of 129 characters", { pageToken: "a".repeat(129) }, "page_token"],
    ["page_token with a character outside base64url", { pageToken: "abc=" }, "page_token"],
  ])("ListRefunds %s", async (_name, fields, field) => {
    const error = await refusal(reader.listRefunds({ orderId: "ord_DEMO00000009", ...fields }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toEqual([field]);
  });

  it.each(badOrderIds)("ListRefunds order_id %j", async (orderId) => {
    const error = await refusal(reader.listRefunds({ orderId }), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field)).toEqual(["order_id"]);
  });

  it.each([
    ["order_id not matching the pattern", "order_id", { orderId: "ord_123" }],
    ["amount_cents 0", "amount_cents", { amountCents: 0n }],
    ["amount_cents -1", "amount_cents", { amountCents: -1n }],
    ["amount_cents 500001", "amount_cents", { amountCents: 500_001n }],
    ["reason unspecified", "reason", { reason: RefundReason.UNSPECIFIED }],
    ["reason 99 (not in the enum)", "reason", { reason: 99 as RefundReason }],
    ["idempotency_key of 15 characters", "idempotency_key", { idempotencyKey: "k".repeat(15) }],
    ["idempotency_key of 65 characters", "idempotency_key", { idempotencyKey: "k".repeat(65) }],
    ["idempotency_key with spaces", "idempotency_key", { idempotencyKey: "bad key with spaces" }],
    ["idempotency_key with slashes", "idempotency_key", { idempotencyKey: "key/with/slashes/0001" }],
  ])("Refund with %s", async (_, field, change) => {
    const rowsBefore = billing.refunds().length;
    const error = await refusal(
      refunder.refund({ ...validRefund, idempotencyKey: `api-test-invalid-${field}-0001`, ...change }),
      CallError,
    );
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("REQUEST_INVALID");
    expect(error.fieldViolations.map((v) => v.field)).toEqual([field]);
    expect(billing.refunds()).toHaveLength(rowsBefore);
  });

  it("accepts the boundary values 1 and 500000 cents and keys of 16 and 64 characters", async () => {
    const at16 = await refunder.refund({ ...validRefund, amountCents: 1n, idempotencyKey: "k".repeat(16) });
    const at64 = await refunder.refund({
      ...validRefund,
      amountCents: 1n,
      idempotencyKey: `${"K_.:-".repeat(12)}abcd`,
    });
    expect([at16.replayed, at64.replayed]).toEqual([false, false]);
    // 500000 passes validation and is then refused by the ledger: order 2 holds 450000.
    const error = await refusal(
      refunder.refund({ ...validRefund, amountCents: 500_000n, idempotencyKey: "api-test-max-amount-0001" }),
      CallError,
    );
    expect(error.code).toBe(status.FAILED_PRECONDITION);
  });
});

describe("auth", () => {
  it("refuses Refund to a token with only billing:read (PERMISSION_DENIED)", async () => {
    const key = "api-test-scope-missing-0001";
    const error = await refusal(reader.refund({ ...validRefund, idempotencyKey: key }), CallError);
    expect(error.code).toBe(status.PERMISSION_DENIED);
    expect(billing.refunds({ key })).toEqual([]);
  });

  it("refuses the read methods to a token with only billing:refund (PERMISSION_DENIED)", async () => {
    expect((await refusal(refunder.getOrder({ orderId: "ord_DEMO00000001" }), CallError)).code).toBe(
      status.PERMISSION_DENIED,
    );
    expect((await refusal(refunder.listRefunds({ orderId: "ord_DEMO00000001" }), CallError)).code).toBe(
      status.PERMISSION_DENIED,
    );
  });

  it("refuses a call without a token (UNAUTHENTICATED)", async () => {
    const anonymous = createRawClient(BillingService, billing.tool.address);
    try {
      const key = "api-test-no-token-0001";
      expect((await refusal(anonymous.refund({ ...validRefund, idempotencyKey: key }), CallError)).code).toBe(
        status.UNAUTHENTICATED,
      );
      expect((await refusal(anonymous.getOrder({ orderId: "ord_DEMO00000001" }), CallError)).code).toBe(
        status.UNAUTHENTICATED,
      );
      expect(billing.refunds({ key })).toEqual([]);
    } finally {
      anonymous.close();
    }
  });
});
