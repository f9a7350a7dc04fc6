// A real billing server over a fresh ledger file in its own temp dir, with the demo orders
// seeded and a fixed clock, plus a direct read-only view of the file to check stored rows.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import type { RawClient } from "@loopguard/tool-sdk";
import { startTestTool, type TestTool, withBoundTokens } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll } from "vitest";
import { DEMO_ORDERS } from "../src/demo-orders.js";
import type { NewRefundRow, OrderRow } from "../src/ledger-rows.js";
import { type SqliteLedgerOptions, SqliteRefundLedger } from "../src/sqlite-ledger.js";
import { build } from "../src/server.js";

export const FIXED_NOW = new Date("2026-11-29T12:00:00.000Z");

export interface BillingFixture {
  readonly tool: TestTool<typeof BillingService>;
  readonly dir: string;
  order(orderId: string): OrderRow | undefined;
  refunds(where?: { orderId?: string; key?: string }): NewRefundRow[];
  close(): Promise<void>;
}

export async function startBilling(options: SqliteLedgerOptions = {}): Promise<BillingFixture> {
  const dir = mkdtempSync(join(tmpdir(), "billing-int-"));
  const file = join(dir, "billing.db");
  const ledger = await SqliteRefundLedger.open(file, options);
  await ledger.seed(DEMO_ORDERS);
  // One test client stands for many sessions at once (e.g. 50 concurrent re-sends): not one greedy caller.
  const tool = await startTestTool(build({ ledger, clock: { now: () => FIXED_NOW } }), { maxConcurrentPerCaller: 64 });
  const db = new Database(file, { readonly: true });
  return {
    tool,
    dir,
    order: (orderId) => db.prepare("SELECT * FROM orders WHERE order_id = ?").get(orderId) as OrderRow | undefined,
    refunds: ({ orderId, key } = {}) =>
      db
        .prepare(
          "SELECT * FROM refunds WHERE (@orderId IS NULL OR order_id = @orderId) AND (@key IS NULL OR idempotency_key = @key) ORDER BY rowid",
        )
        .all({ orderId: orderId ?? null, key: key ?? null }) as NewRefundRow[],
    async close() {
      db.close();
      await tool.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A Refund request, its reason DAMAGED unless told. */
/** A Refund request as the orchestrator sends one: with a bound (here one no order reaches). */
export function refundOf(orderId: string, amountCents: bigint, idempotencyKey: string, reason = RefundReason.DAMAGED) {
  return { orderId, amountCents, reason, idempotencyKey, maxRefundedTotalCents: NO_ORDER_REACHES };
}

/** A bound above every demo order's paid amount. */
export const NO_ORDER_REACHES = 1_000_000_000n;

/** The billing server a test file shares, started before its tests and closed after them. */
export interface BillingSuite {
  readonly billing: BillingFixture;
  /** A client holding `scopes`, its tokens bound to each request. */
  readonly client: RawClient<typeof BillingService>;
}

export function useBilling(scopes: string[]): BillingSuite {
  // Filled in before the file's first test runs.
  const suite = {} as { billing: BillingFixture; client: RawClient<typeof BillingService> };
  beforeAll(async () => {
    suite.billing = await startBilling();
    suite.client = withBoundTokens(BillingService, await suite.billing.tool.client(scopes));
  });
  afterAll(() => suite.billing.close());
  return suite;
}
