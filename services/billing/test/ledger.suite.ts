import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DEMO_ORDERS } from "./demo-orders.js";
import { LedgerError, RefundLedger, refundRequestHash } from "./ledger.js";

const at = new Date("2026-11-29T12:00:00.000Z");
const DAMAGED = 1;
const WRONG_ITEM = 3;

let dir: string;
let ledger: RefundLedger;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "billing-ledger-"));
  ledger = RefundLedger.open(join(dir, "billing.db"));
  ledger.seed(DEMO_ORDERS);
});

afterEach(() => {
  ledger.close();
  rmSync(dir, { recursive: true, force: true });
});

function refundRows(orderId: string): { amount_cents: number; idempotency_key: string }[] {
  const db = new Database(join(dir, "billing.db"), { readonly: true });
  try {
    return db.prepare("SELECT amount_cents, idempotency_key FROM refunds WHERE order_id = ?").all(orderId) as never;
  } finally {
    db.close();
  }
}

function refusal(work: () => unknown): LedgerError {
  try {
    work();
  } catch (error) {
    if (error instanceof LedgerError) return error;
    throw error;
  }
  throw new Error("expected a LedgerError");
}

describe("RefundLedger", () => {
  it("keeps the file in WAL mode", () => {
    const db = new Database(join(dir, "billing.db"), { readonly: true });
    expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
    db.close();
  });

  it("seeds the demo orders once, deriving refunded totals from their refunds", () => {
    ledger.seed(DEMO_ORDERS);
    expect(ledger.getOrder("ord_DEMO00000005")).toMatchObject({ state: "PAID", amountPaidCents: 8000, amountRefundedCents: 2500, refundableCents: 5500, version: 2 });
    expect(ledger.getOrder("ord_DEMO00000006")).toMatchObject({ state: "REFUNDED", amountRefundedCents: 2999, refundableCents: 0 });
    expect(ledger.getOrder("ord_DEMO00000003")).toMatchObject({ state: "PENDING", refundableCents: 0 });
    expect(refundRows("ord_DEMO00000005")).toHaveLength(1);
  });

  it("does not overwrite an order that changed since it was seeded", () => {
    ledger.refund({ orderId: "ord_DEMO00000001", amountCents: 999, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at });
    ledger.seed(DEMO_ORDERS);
    expect(ledger.getOrder("ord_DEMO00000001")).toMatchObject({ amountRefundedCents: 999, version: 2 });
  });

  it("records a refund and updates the order's totals and version", () => {
    const outcome = ledger.refund({ orderId: "ord_DEMO00000001", amountCents: 2999, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at });
    expect(outcome.replayed).toBe(false);
    expect(outcome.refund.refundId).toMatch(/^rf_[A-Za-z0-9]{16}$/);
    expect(outcome.refund).toMatchObject({ orderId: "ord_DEMO00000001", amountCents: 2999, reason: DAMAGED, createdAt: at });
    expect(outcome.orderRefundableCents).toBe(10_000);
    expect(ledger.getOrder("ord_DEMO00000001")).toMatchObject({ state: "PAID", amountRefundedCents: 2999, refundableCents: 10_000, version: 2 });
  });

  it("marks the order REFUNDED when the last cent is refunded", () => {
    ledger.refund({ orderId: "ord_DEMO00000007", amountCents: 199, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at });
    expect(ledger.getOrder("ord_DEMO00000007")).toMatchObject({ state: "REFUNDED", refundableCents: 0, amountRefundedCents: 199 });
    expect(refusal(() => ledger.refund({ orderId: "ord_DEMO00000007", amountCents: 1, reason: DAMAGED, idempotencyKey: "unit-key-000000002", at })).reason).toBe(
      "ORDER_NOT_REFUNDABLE",
    );
  });

  it("replays the first outcome for the same key and parameters without writing", () => {
    const command = { orderId: "ord_DEMO00000008", amountCents: 100, reason: WRONG_ITEM, idempotencyKey: "unit-key-000000001", at };
    const first = ledger.refund(command);
    ledger.refund({ ...command, idempotencyKey: "unit-key-000000002" });
    const again = ledger.refund({ ...command, at: new Date(at.getTime() + 60_000) });
    expect(again).toEqual({ ...first, replayed: true });
    expect(refundRows("ord_DEMO00000008")).toHaveLength(2);
    expect(ledger.getOrder("ord_DEMO00000008")).toMatchObject({ amountRefundedCents: 200, version: 3 });
  });

  it.each([
    ["another amount", { amountCents: 101 }],
    ["another reason", { reason: DAMAGED }],
    ["another order", { orderId: "ord_DEMO00000001" }],
  ])("refuses a key reused with %s and writes nothing", (_, change) => {
    const command = { orderId: "ord_DEMO00000008", amountCents: 100, reason: WRONG_ITEM, idempotencyKey: "unit-key-000000001", at };
    ledger.refund(command);
    expect(refusal(() => ledger.refund({ ...command, ...change })).reason).toBe("IDEMPOTENCY_KEY_REUSED");
    expect(refundRows("ord_DEMO00000008")).toHaveLength(1);
    expect(refundRows("ord_DEMO00000001")).toHaveLength(0);
  });

  it("refuses an unknown order", () => {
    expect(refusal(() => ledger.refund({ orderId: "ord_UNKNOWN00001", amountCents: 1, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at })).reason).toBe(
      "ORDER_NOT_FOUND",
    );
    expect(ledger.getOrder("ord_UNKNOWN00001")).toBeUndefined();
    expect(ledger.listRefunds("ord_UNKNOWN00001")).toBeUndefined();
  });

  it.each(["ord_DEMO00000003", "ord_DEMO00000004", "ord_DEMO00000006"])("refuses to refund %s, which is not paid", (orderId) => {
    const before = ledger.getOrder(orderId);
    expect(refusal(() => ledger.refund({ orderId, amountCents: 1, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at })).reason).toBe(
      "ORDER_NOT_REFUNDABLE",
    );
    expect(ledger.getOrder(orderId)).toEqual(before);
  });

  it("refuses more than is still refundable and leaves the order as it was", () => {
    const before = ledger.getOrder("ord_DEMO00000005");
    expect(refusal(() => ledger.refund({ orderId: "ord_DEMO00000005", amountCents: 5501, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at })).reason).toBe(
      "ORDER_NOT_REFUNDABLE",
    );
    expect(ledger.getOrder("ord_DEMO00000005")).toEqual(before);
    expect(refundRows("ord_DEMO00000005")).toHaveLength(1);
    // The refused key stays free for a refund that fits.
    expect(ledger.refund({ orderId: "ord_DEMO00000005", amountCents: 5500, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at }).replayed).toBe(false);
  });

  it("lists an order's refunds oldest first", () => {
    const first = ledger.refund({ orderId: "ord_DEMO00000005", amountCents: 100, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at });
    const second = ledger.refund({ orderId: "ord_DEMO00000005", amountCents: 200, reason: WRONG_ITEM, idempotencyKey: "unit-key-000000002", at });
    expect(ledger.listRefunds("ord_DEMO00000005")?.map((r) => r.refundId)).toEqual(["rf_DEMO000000000005", first.refund.refundId, second.refund.refundId]);
    expect(ledger.listRefunds("ord_DEMO00000001")).toEqual([]);
  });

  it("executes one key once when two processes' connections race for it", () => {
    const other = RefundLedger.open(join(dir, "billing.db"));
    try {
      const command = { orderId: "ord_DEMO00000002", amountCents: 5000, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at };
      const first = ledger.refund(command);
      const second = other.refund(command);
      expect(second).toEqual({ ...first, replayed: true });
      expect(refundRows("ord_DEMO00000002")).toHaveLength(1);
    } finally {
      other.close();
    }
  });

  it("reports LEDGER_UNAVAILABLE when another connection holds the write lock past the busy timeout", () => {
    const file = join(dir, "billing.db");
    const impatient = RefundLedger.open(file, { busyTimeoutMs: 50 });
    const holder = new Database(file);
    try {
      holder.exec("BEGIN IMMEDIATE");
      const error = refusal(() => impatient.refund({ orderId: "ord_DEMO00000002", amountCents: 1, reason: DAMAGED, idempotencyKey: "unit-key-000000001", at }));
      expect(error.reason).toBe("LEDGER_UNAVAILABLE");
      holder.exec("ROLLBACK");
      expect(refundRows("ord_DEMO00000002")).toHaveLength(0);
    } finally {
      holder.close();
      impatient.close();
    }
  });

  it("hashes the order, amount and reason of a request", () => {
    expect(refundRequestHash("ord_DEMO00000001", 100, 1)).toBe(refundRequestHash("ord_DEMO00000001", 100, 1));
    expect(refundRequestHash("ord_DEMO00000001", 100, 1)).not.toBe(refundRequestHash("ord_DEMO00000001", 100, 2));
    expect(refundRequestHash("ord_DEMO00000001", 100, 1)).toMatch(/^[0-9a-f]{64}$/);
  });
});
