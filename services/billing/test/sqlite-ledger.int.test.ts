import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { sqliteModes } from "@loopguard/test-kit";
import { describe, expect, it } from "vitest";
import { DEMO_ORDERS } from "../src/demo-orders.js";
import { SQLITE_LEDGER_MIGRATIONS, SqliteRefundLedger } from "../src/sqlite-ledger.js";
import { describeRefundLedger } from "./ledger.suite.js";

describeRefundLedger("sqlite", async () => {
  const dir = mkdtempSync(join(tmpdir(), "billing-ledger-"));
  const file = join(dir, "billing.db");
  const ledger = await SqliteRefundLedger.open(file);
  await ledger.seed(DEMO_ORDERS);
  const raw = new Database(file);
  return {
    ledger,
    openAnother: (options) => SqliteRefundLedger.open(file, options),
    refundRows: async (orderId) =>
      raw
        .prepare("SELECT amount_cents, idempotency_key FROM refunds WHERE order_id = ? ORDER BY created_at, rowid")
        .all(orderId) as never,
    async holdLock() {
      const holder = new Database(file);
      holder.exec("BEGIN IMMEDIATE");
      return async () => {
        holder.exec("ROLLBACK");
        holder.close();
      };
    },
    async close() {
      await ledger.close();
      raw.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe("the SQLite ledger file", () => {
  it("is created 0600 in a folder created 0700, in WAL mode with full sync", async () => {
    const root = mkdtempSync(join(tmpdir(), "billing-ledger-"));
    const file = join(root, "data", "billing.db");
    try {
      const ledger = await SqliteRefundLedger.open(file);
      await ledger.seed(DEMO_ORDERS);
      expect(sqliteModes(join(root, "data"), "billing.db")).toEqual([0o700, 0o600, 0o600, 0o600]);
      await ledger.close();
      const db = new Database(file, { readonly: true });
      expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
      db.close();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("adopts a file made before migrations existed, keeping its orders and refunds", async () => {
    const dir = mkdtempSync(join(tmpdir(), "billing-ledger-"));
    const file = join(dir, "billing.db");
    const oldRefund = {
      orderId: "ord_DEMO00000001",
      amountCents: 500,
      reason: 1,
      idempotencyKey: "old-layout-key-0001",
      maxRefundedTotalCents: 0,
      at: new Date(),
    };
    try {
      const first = await SqliteRefundLedger.open(file);
      await first.seed(DEMO_ORDERS);
      const refund = await first.refund(oldRefund);
      await first.close();
      // What earlier builds left: the same tables, no migrations table.
      const raw = new Database(file);
      raw.exec("DROP TABLE loopguard_schema_migrations");
      raw.close();

      const upgraded = await SqliteRefundLedger.open(file);
      expect(upgraded.migrationsApplied).toEqual(SQLITE_LEDGER_MIGRATIONS.map((m) => m.name));
      expect(await upgraded.getOrder("ord_DEMO00000001")).toMatchObject({ amountRefundedCents: 500, version: 2 });
      expect((await upgraded.refund(oldRefund)).refund.refundId).toBe(refund.refund.refundId);
      await upgraded.close();
      const reopened = await SqliteRefundLedger.open(file);
      expect(reopened.migrationsApplied).toEqual([]);
      await reopened.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
