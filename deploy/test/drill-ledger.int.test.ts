// The drills' ledger audit against a real billing process: it reads every page of each order's
// refunds, so refunds past the first page (earlier game days can leave thousands on the bulk order)
// are neither taken for lost nor missed.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { freePort, kill, type ServiceProcess } from "@loopguard/test-kit";
import { createRawClient } from "@loopguard/tool-sdk";
import { startTool, testToken, withBoundTokens } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { billingLedger } from "../src/ops/drills/money.js";

let dataDir: string;
let billing: ServiceProcess;
let port: number;
const made: { refundId: string; orderId: string; amountCents: number }[] = [];

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "loopguard-drill-ledger-"));
  port = await freePort();
  billing = await startTool("billing", dataDir, port);
  const refunder = withBoundTokens(
    BillingService,
    createRawClient(BillingService, billing.address, { token: await testToken({ scopes: ["billing:refund"] }) }),
  );
  try {
    for (const [i, orderId] of [
      "ord_DEMO00000009",
      "ord_DEMO00000009",
      "ord_DEMO00000001",
      "ord_DEMO00000009",
    ].entries()) {
      const { refund } = await refunder.refund({
        orderId,
        amountCents: BigInt(i + 1),
        reason: RefundReason.DAMAGED,
        idempotencyKey: `drill-ledger-test-000${i}`,
        maxRefundedTotalCents: 1_000_000n,
      });
      made.push({ refundId: refund!.refundId, orderId, amountCents: i + 1 });
    }
  } finally {
    refunder.close();
  }
}, 30_000);

afterAll(async () => {
  if (billing) await kill(billing);
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const ctx = {
  serviceApi: () => billing.address,
  token: (_person: string, audience: string, scopes: string[]) => testToken({ audience, scopes }),
};

it("reads every page of each order's refunds, in the order billing made them", async () => {
  const orders = ["ord_DEMO00000009", "ord_DEMO00000001", "ord_DEMO00000008"];
  const expected = orders.flatMap((orderId) => made.filter((r) => r.orderId === orderId));
  expect(expected).toHaveLength(4);
  // Pages of one refund: three pages for ord_DEMO00000009, where one page would hold only its first.
  expect(await billingLedger(ctx, 1)(orders)).toEqual(expected);
  expect(await billingLedger(ctx)(orders)).toEqual(expected);
});

it("goes on where it stopped when billing restarts while it reads: a page token outlives the process", async () => {
  const orders = ["ord_DEMO00000009", "ord_DEMO00000001"];
  const expected = orders.flatMap((orderId) => made.filter((r) => r.orderId === orderId));
  const reader = createRawClient(BillingService, billing.address, {
    token: await testToken({ scopes: ["billing:read"] }),
  });
  try {
    const first = await reader.listRefunds({ orderId: "ord_DEMO00000009", pageSize: 1 });
    expect(first.nextPageToken).not.toBe("");
    await kill(billing);
    // The audit starts while billing is down: its pages are retried until billing is back.
    const audit = billingLedger(ctx, 1)(orders);
    await new Promise((done) => setTimeout(done, 300));
    billing = await startTool("billing", dataDir, port);
    expect(await audit).toEqual(expected);
    const second = await reader.listRefunds({
      orderId: "ord_DEMO00000009",
      pageSize: 1,
      pageToken: first.nextPageToken,
    });
    expect(second.refunds.map((r) => r.refundId)).toEqual([
      made.filter((r) => r.orderId === "ord_DEMO00000009")[1]!.refundId,
    ]);
  } finally {
    reader.close();
  }
}, 30_000);
