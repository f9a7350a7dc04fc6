// Billing holds the line itself: Refund runs only under the orchestrator's token bound to the exact
// request (its `req` claim), over real gRPC. A person's token, an unbound orchestrator token, or one
// bound to another amount, order or key is PERMISSION_DENIED CREDENTIAL_NOT_BOUND, and nothing moves.
import { refusal } from "@loopguard/test-kit";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { CallError, createRawClient, mintToken, type RawClient, status } from "@loopguard/tool-sdk";
import { boundToken, TEST_ORCHESTRATOR_KEY } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BillingFixture, refundOf, startBilling } from "./billing-fixture.js";

let billing: BillingFixture;
let client: RawClient<typeof BillingService>;

beforeAll(async () => {
  billing = await startBilling();
  client = createRawClient(BillingService, billing.tool.address);
});
afterAll(async () => {
  client.close();
  await billing.close();
});

const request = refundOf("ord_DEMO00000002", 1500n, "bound-credentials-0001");

async function notBound(promise: Promise<unknown>): Promise<string> {
  const error = await refusal(promise, CallError);
  expect([status[error.code], error.reason]).toEqual(["PERMISSION_DENIED", "CREDENTIAL_NOT_BOUND"]);
  return error.message;
}

describe("Refund's credential", () => {
  it("refuses a person's token even with billing:refund, and moves nothing", async () => {
    const person = await billing.tool.client(["billing:refund"], "operator");
    expect(await notBound(person.refund(request))).toMatch(/operator's person token/);
    expect(billing.refunds({ key: request.idempotencyKey })).toEqual([]);
  });

  it("refuses the orchestrator's token when it is bound to no request", async () => {
    const token = await mintToken(TEST_ORCHESTRATOR_KEY, {
      subject: "session:s1",
      audience: "billing",
      scopes: ["billing:refund"],
    });
    expect(await notBound(client.refund(request, { token }))).toMatch(/bound to none/);
    expect(billing.refunds({ key: request.idempotencyKey })).toEqual([]);
  });

  it.each([
    ["another amount", { amountCents: 1600n }],
    ["another order", { orderId: "ord_DEMO00000001" }],
    ["another idempotency key", { idempotencyKey: "bound-credentials-0002" }],
    ["another reason", { reason: RefundReason.WRONG_ITEM }],
  ])("refuses a token bound to the request under %s", async (_, change) => {
    const token = await boundToken(BillingService, "Refund", request);
    const other = { ...request, ...change };
    expect(await notBound(client.refund(other, { token }))).toMatch(/bound to another request/);
    expect(billing.refunds({ key: other.idempotencyKey })).toEqual([]);
    expect(billing.order("ord_DEMO00000002")?.amount_refunded_cents).toBe(0);
  });

  it("refuses a request without the caller's bound (0), naming the field, and moves nothing", async () => {
    const unbounded = { ...refundOf("ord_DEMO00000005", 5500n, "bound-credentials-0003"), maxRefundedTotalCents: 0n };
    const error = await refusal(
      client.refund(unbounded, { token: await boundToken(BillingService, "Refund", unbounded) }),
      CallError,
    );
    expect([status[error.code], error.reason, error.fieldViolations.map((v) => v.field)]).toEqual([
      "INVALID_ARGUMENT",
      "REQUEST_INVALID",
      ["max_refunded_total_cents"],
    ]);
    expect(billing.refunds({ key: unbounded.idempotencyKey })).toEqual([]);
  });

  it("names a bad amount and the missing bound in one refusal, and moves nothing", async () => {
    const both = { ...refundOf("ord_DEMO00000005", 0n, "bound-credentials-0004"), maxRefundedTotalCents: 0n };
    const error = await refusal(
      client.refund(both, { token: await boundToken(BillingService, "Refund", both) }),
      CallError,
    );
    expect([status[error.code], error.reason, error.fieldViolations.map((v) => `${v.field} ${v.reason}`)]).toEqual([
      "INVALID_ARGUMENT",
      "REQUEST_INVALID",
      ["amount_cents int64.gte_lte", "max_refunded_total_cents bound.required"],
    ]);
    expect(billing.refunds({ key: both.idempotencyKey })).toEqual([]);
  });

  it("runs the exact request its token is bound to", async () => {
    const response = await client.refund(request, { token: await boundToken(BillingService, "Refund", request) });
    expect(response.replayed).toBe(false);
    expect(billing.refunds({ key: request.idempotencyKey })).toHaveLength(1);
  });
});
