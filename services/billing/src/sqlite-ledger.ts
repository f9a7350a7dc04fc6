// RefundLedger on one SQLite file, for a single billing process. Every refund is one
// BEGIN IMMEDIATE transaction: the write lock is taken before the key is read, so processes
// sharing the file serialise on it, and a refund is either wholly recorded or not at all. While
// another connection holds the lock (a second process, a backup, an operator's shell) a refund
// waits for it without blocking the process, and past lockTimeoutMs is LEDGER_UNAVAILABLE.
import {
  isSqliteUnavailable,
  openMigratedSqlite,
  retryWhileBusy,
  type SchemaOptions,
  type SqliteMigration,
} from "@loopguard/sql-store";
import type Database from "better-sqlite3";
import {
  type BreakGlassRow,
  guardLedger,
  MAX_LISTED_REFUNDS,
  type OrderRecord,
  type RefundCommand,
  type RefundLedger,
  type RefundOutcome,
  type RefundPage,
  type RefundPageRequest,
  type SeedOrder,
} from "./ledger.js";
import {
  breakGlassRow,
  type NewRefundRow,
  type OrderRow,
  orderOf,
  type RefundRow,
  refundPage,
  seedRows,
} from "./ledger-rows.js";
import { decideRefund, dryRunOutcome, insertedOutcome } from "./refund-decision.js";

export interface SqliteLedgerOptions extends SchemaOptions {
  /**
   * How long a refund waits for another connection's lock before giving up with LEDGER_UNAVAILABLE
   * (default 1 s: within Refund's 2 s SLA, as the PostgreSQL ledger's lock timeout).
   */
  readonly lockTimeoutMs?: number;
}

/** The layout files made before migrations existed already have; IF NOT EXISTS adopts them as they are. */
export const SQLITE_LEDGER_MIGRATIONS: readonly SqliteMigration[] = [
  {
    name: "0001-orders-and-refunds",
    compatibility: "expand",
    up: (db) => {
      db.exec(`
        CREATE TABLE IF NOT EXISTS orders (
          order_id              TEXT PRIMARY KEY,
          customer_id           TEXT NOT NULL,
          status                TEXT NOT NULL CHECK (status IN ('PENDING', 'PAID', 'CANCELLED', 'REFUNDED')),
          amount_paid_cents     INTEGER NOT NULL CHECK (amount_paid_cents >= 0),
          amount_refunded_cents INTEGER NOT NULL DEFAULT 0
                                CHECK (amount_refunded_cents >= 0 AND amount_refunded_cents <= amount_paid_cents),
          currency              TEXT NOT NULL,
          created_at            INTEGER NOT NULL,
          version               INTEGER NOT NULL DEFAULT 1
        ) STRICT;
        CREATE TABLE IF NOT EXISTS refunds (
          refund_id              TEXT PRIMARY KEY,
          order_id               TEXT NOT NULL REFERENCES orders (order_id),
          amount_cents           INTEGER NOT NULL CHECK (amount_cents > 0),
          reason                 INTEGER NOT NULL,
          idempotency_key        TEXT NOT NULL UNIQUE,
          request_hash           TEXT NOT NULL,
          refundable_after_cents INTEGER NOT NULL CHECK (refundable_after_cents >= 0),
          created_at             INTEGER NOT NULL
        ) STRICT;
        CREATE INDEX IF NOT EXISTS refunds_by_order ON refunds (order_id, created_at);`);
    },
  },
  {
    name: "0002-break-glass-refunds",
    compatibility: "expand",
    up: (db) => {
      db.exec(`
        CREATE TABLE IF NOT EXISTS break_glass_refunds (
          refund_id    TEXT PRIMARY KEY REFERENCES refunds (refund_id),
          order_id     TEXT NOT NULL,
          amount_cents INTEGER NOT NULL,
          subject      TEXT NOT NULL,
          key_id       TEXT NOT NULL,
          reason       TEXT NOT NULL,
          at           INTEGER NOT NULL
        ) STRICT;`);
    },
  },
  {
    // ListRefunds pages through an order's refunds by rowid: the order a single writer made them in.
    name: "0003-refunds-by-order-made",
    compatibility: "expand",
    up: (db) => {
      db.exec("CREATE INDEX IF NOT EXISTS refunds_by_order_made ON refunds (order_id);");
    },
  },
];

/** Refund's SLA timeout is 2 s: a lock held longer than this is LEDGER_UNAVAILABLE, retryable, before it passes. */
const DEFAULT_LOCK_TIMEOUT_MS = 1000;

export class SqliteRefundLedger implements RefundLedger {
  private readonly selectOrder: Database.Statement<[string], OrderRow>;
  private readonly selectRefundByKey: Database.Statement<[string], RefundRow>;
  private readonly selectRefundsOfOrder: Database.Statement<[string, number, number], RefundRow & { seq: number }>;
  private readonly insertOrder: Database.Statement<[OrderRow]>;
  private readonly insertRefund: Database.Statement<[NewRefundRow]>;
  private readonly insertBreakGlass: Database.Statement<[BreakGlassRow]>;
  private readonly selectBreakGlass: Database.Statement<[], BreakGlassRow>;
  private readonly updateOrderTotals: Database.Statement<[{ order_id: string; amount_cents: number; version: number }]>;
  private readonly refundInTransaction: (command: RefundCommand) => RefundOutcome;

  private constructor(
    private readonly db: Database.Database,
    readonly migrationsApplied: readonly string[],
    private readonly lockTimeoutMs: number,
  ) {
    // Locks are waited for in retryWhileBusy, between turns of the event loop, not inside SQLite.
    db.pragma("busy_timeout = 0");
    this.selectOrder = db.prepare("SELECT * FROM orders WHERE order_id = ?");
    this.selectRefundByKey = db.prepare("SELECT * FROM refunds WHERE idempotency_key = ?");
    this.selectRefundsOfOrder = db.prepare(
      // An index on order_id holds each order's rowids in order: the page is a range of it.
      "SELECT rowid AS seq, * FROM refunds WHERE order_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
    );
    this.insertOrder = db.prepare(
      `INSERT OR IGNORE INTO orders (order_id, customer_id, status, amount_paid_cents, amount_refunded_cents, currency, created_at, version)
       VALUES (@order_id, @customer_id, @status, @amount_paid_cents, @amount_refunded_cents, @currency, @created_at, @version)`,
    );
    this.insertRefund = db.prepare(
      `INSERT INTO refunds (refund_id, order_id, amount_cents, reason, idempotency_key, request_hash, refundable_after_cents, created_at)
       VALUES (@refund_id, @order_id, @amount_cents, @reason, @idempotency_key, @request_hash, @refundable_after_cents, @created_at)`,
    );
    this.insertBreakGlass = db.prepare(
      `INSERT INTO break_glass_refunds (refund_id, order_id, amount_cents, subject, key_id, reason, at) VALUES (@refund_id, @order_id, @amount_cents, @subject, @key_id, @reason, @at)`,
    );
    this.selectBreakGlass = db.prepare("SELECT * FROM break_glass_refunds ORDER BY at, rowid");
    // The version guard makes the update a no-op if the row changed since it was read, which
    // cannot happen inside the IMMEDIATE transaction; the change count is still checked below.
    this.updateOrderTotals = db.prepare(
      `UPDATE orders
          SET amount_refunded_cents = amount_refunded_cents + @amount_cents,
              status = CASE WHEN amount_refunded_cents + @amount_cents = amount_paid_cents THEN 'REFUNDED' ELSE status END,
              version = version + 1
        WHERE order_id = @order_id AND version = @version`,
    );
    this.refundInTransaction = db.transaction((command: RefundCommand) => this.refundUnlocked(command)).immediate;
  }

  /** Opens (creating and migrating) the ledger file; `:memory:` gives a private in-memory ledger. */
  static async open(file: string, options: SqliteLedgerOptions = {}): Promise<SqliteRefundLedger> {
    const { db, applied } = await openMigratedSqlite(file, "billing", SQLITE_LEDGER_MIGRATIONS, {
      // FULL, not NORMAL: an acknowledged refund must survive power loss (docs/performance.md, "Billing's synchronous=FULL").
      synchronous: "FULL",
      busyTimeoutMs: options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS,
      foreignKeys: true,
      ...(options.migrate === undefined ? {} : { migrate: options.migrate }),
    });
    return new SqliteRefundLedger(db, applied, options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS);
  }

  async seed(orders: readonly SeedOrder[]): Promise<void> {
    await this.guard(() =>
      this.db
        .transaction(() => {
          for (const rows of orders.map(seedRows)) {
            if (this.insertOrder.run(rows.order).changes === 0) continue;
            for (const refund of rows.refunds) this.insertRefund.run(refund);
          }
        })
        .immediate(),
    );
  }

  async getOrder(orderId: string): Promise<OrderRecord | undefined> {
    const row = await this.guard(() => this.selectOrder.get(orderId));
    return row ? orderOf(row) : undefined;
  }

  async listRefunds(orderId: string, page: RefundPageRequest = {}): Promise<RefundPage | undefined> {
    const size = page.size ?? MAX_LISTED_REFUNDS;
    return this.guard(() =>
      this.db
        .transaction(() => {
          if (!this.selectOrder.get(orderId)) return undefined;
          return refundPage(this.selectRefundsOfOrder.all(orderId, page.after ?? 0, size + 1), size);
        })
        .deferred(),
    );
  }

  async refund(command: RefundCommand): Promise<RefundOutcome> {
    // Checked before each try for the lock: a caller that gave up while the refund waited (its
    // deadline, a cancel) is not refunded once the lock frees. The transaction itself runs whole.
    return this.guard(() => {
      command.signal?.throwIfAborted();
      return this.refundInTransaction(command);
    });
  }

  async breakGlassRefunds(): Promise<BreakGlassRow[]> {
    return this.guard(() => this.selectBreakGlass.all());
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }

  /** Runs ledger work, waiting for another connection's lock up to lockTimeoutMs; what cannot be done now is LEDGER_UNAVAILABLE. */
  private guard<T>(work: () => T): Promise<T> {
    return guardLedger(isSqliteUnavailable, () => retryWhileBusy(work, this.lockTimeoutMs));
  }

  private refundUnlocked(command: RefundCommand): RefundOutcome {
    const decision = decideRefund(
      command,
      this.selectRefundByKey.get(command.idempotencyKey),
      this.selectOrder.get(command.orderId),
    );
    if ("replay" in decision) return decision.replay;
    const { insert, order } = decision;
    if (command.dryRun) return dryRunOutcome(insert);
    this.insertRefund.run(insert);
    const updated = this.updateOrderTotals.run({
      order_id: order.order_id,
      amount_cents: insert.amount_cents,
      version: order.version,
    });
    if (updated.changes !== 1) throw new Error(`order ${order.order_id} changed inside its refund transaction`);
    const audit = breakGlassRow(command, insert);
    if (audit) this.insertBreakGlass.run(audit);
    return insertedOutcome(insert);
  }
}
