// RefundLedger on PostgreSQL, for several billing replicas sharing one ledger. A key used before
// is answered from its row. A new key runs one READ COMMITTED transaction that first locks the
// order's row (SELECT … FOR UPDATE), then reads the key again: refunds of one order queue on that
// lock, and a duplicate in flight waits there, then sees the first one's committed row and
// replays it. A key reused concurrently for another order meets the UNIQUE constraint instead;
// the transaction then runs again and finds the key taken. Every wait is bounded (connect, lock,
// statement, read), so an unreachable or stuck database is LEDGER_UNAVAILABLE, never a hang.
import {
  commitOutcomeUnknown,
  inTransaction,
  isPostgresUnavailable,
  openMigratedPostgres,
  type PostgresMigration,
  type PostgresStoreOptions,
} from "@loopguard/sql-store";
import type pg from "pg";
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

/**
 * Refund's SLA timeout is 2 s: a database that does not answer must become LEDGER_UNAVAILABLE
 * (with a retry delay) inside it, not a DEADLINE_EXCEEDED that says nothing.
 */
export const POSTGRES_LEDGER_DEFAULTS = {
  connectTimeoutMs: 1000,
  statementTimeoutMs: 1000,
  lockTimeoutMs: 1000,
} as const;

export const POSTGRES_LEDGER_MIGRATIONS: readonly PostgresMigration[] = [
  {
    name: "0001-orders-and-refunds",
    compatibility: "expand",
    up: async (db) => {
      await db.query(`
        CREATE TABLE orders (
          order_id              text PRIMARY KEY,
          customer_id           text NOT NULL,
          status                text NOT NULL CHECK (status IN ('PENDING', 'PAID', 'CANCELLED', 'REFUNDED')),
          amount_paid_cents     bigint NOT NULL CHECK (amount_paid_cents >= 0),
          amount_refunded_cents bigint NOT NULL DEFAULT 0
                                CHECK (amount_refunded_cents >= 0 AND amount_refunded_cents <= amount_paid_cents),
          currency              text NOT NULL,
          created_at            bigint NOT NULL,
          version               integer NOT NULL DEFAULT 1
        );
        CREATE TABLE refunds (
          refund_id              text PRIMARY KEY,
          order_id               text NOT NULL REFERENCES orders (order_id),
          amount_cents           bigint NOT NULL CHECK (amount_cents > 0),
          reason                 integer NOT NULL,
          idempotency_key        text NOT NULL UNIQUE,
          request_hash           text NOT NULL,
          refundable_after_cents bigint NOT NULL CHECK (refundable_after_cents >= 0),
          created_at             bigint NOT NULL,
          seq                    bigint GENERATED ALWAYS AS IDENTITY
        );
        CREATE INDEX refunds_by_order ON refunds (order_id, created_at, seq);`);
    },
  },
  {
    name: "0002-break-glass-refunds",
    compatibility: "expand",
    up: async (db) => {
      await db.query(`
        CREATE TABLE break_glass_refunds (
          refund_id    text PRIMARY KEY REFERENCES refunds (refund_id),
          order_id     text NOT NULL,
          amount_cents bigint NOT NULL,
          subject      text NOT NULL,
          key_id       text NOT NULL,
          reason       text NOT NULL,
          at           bigint NOT NULL,
          seq          bigint GENERATED ALWAYS AS IDENTITY
        );`);
    },
  },
  {
    // ListRefunds pages through an order's refunds by seq: each order's refunds are made one at a
    // time under its row lock, so their seqs rise in the order they were committed.
    name: "0003-refunds-by-order-made",
    compatibility: "expand",
    up: async (db) => {
      await db.query("CREATE INDEX refunds_by_order_made ON refunds (order_id, seq);");
    },
  },
];

const REFUND_COLUMNS = "refund_id, order_id, amount_cents, reason, request_hash, refundable_after_cents, created_at";
const SELECT_REFUND_BY_KEY = `SELECT ${REFUND_COLUMNS} FROM refunds WHERE idempotency_key = $1`;
const INSERT_REFUND = `INSERT INTO refunds (refund_id, order_id, amount_cents, reason, idempotency_key, request_hash, refundable_after_cents, created_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`;

/** INSERT_REFUND's parameters, in its column order. */
function refundParams(r: NewRefundRow): (string | number)[] {
  return [
    r.refund_id,
    r.order_id,
    r.amount_cents,
    r.reason,
    r.idempotency_key,
    r.request_hash,
    r.refundable_after_cents,
    r.created_at,
  ];
}

const guard = <T>(work: () => Promise<T>) => guardLedger(isPostgresUnavailable, work, commitOutcomeUnknown);

/** A unique key another transaction took first; running again sees what it wrote. */
const isUniqueViolation = (error: unknown) => (error as { code?: unknown } | null)?.code === "23505";

export class PostgresRefundLedger implements RefundLedger {
  private constructor(
    private readonly pool: pg.Pool,
    readonly migrationsApplied: readonly string[],
  ) {}

  static async open(url: string, options: PostgresStoreOptions = {}): Promise<PostgresRefundLedger> {
    const { db, applied } = await openMigratedPostgres(url, "billing", POSTGRES_LEDGER_MIGRATIONS, {
      ...POSTGRES_LEDGER_DEFAULTS,
      applicationName: "loopguard-billing",
      ...options,
    });
    return new PostgresRefundLedger(db, applied);
  }

  async seed(orders: readonly SeedOrder[]): Promise<void> {
    // ON CONFLICT DO NOTHING waits for a concurrent seeder's uncommitted row, then skips it: replicas
    // starting together insert each order, and its refunds, once.
    await guard(() =>
      inTransaction(this.pool, async (client) => {
        for (const { order, refunds } of orders.map(seedRows)) {
          const inserted = await client.query(
            `INSERT INTO orders (order_id, customer_id, status, amount_paid_cents, amount_refunded_cents, currency, created_at, version)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (order_id) DO NOTHING`,
            [
              order.order_id,
              order.customer_id,
              order.status,
              order.amount_paid_cents,
              order.amount_refunded_cents,
              order.currency,
              order.created_at,
              order.version,
            ],
          );
          if (inserted.rowCount === 0) continue;
          for (const r of refunds) {
            await client.query(INSERT_REFUND, refundParams(r));
          }
        }
      }),
    );
  }

  async getOrder(orderId: string): Promise<OrderRecord | undefined> {
    const { rows } = await guard(() =>
      this.pool.query<OrderRow>("SELECT * FROM orders WHERE order_id = $1", [orderId]),
    );
    return rows[0] ? orderOf(rows[0]) : undefined;
  }

  async listRefunds(orderId: string, page: RefundPageRequest = {}): Promise<RefundPage | undefined> {
    const size = page.size ?? MAX_LISTED_REFUNDS;
    // One statement, one snapshot: the order's existence and its refunds are read together.
    const { rows } = await guard(() =>
      this.pool.query<Partial<RefundRow & { seq: number }>>(
        `SELECT r.* FROM orders o
           LEFT JOIN LATERAL (SELECT ${REFUND_COLUMNS}, seq FROM refunds WHERE order_id = o.order_id AND seq > $3 ORDER BY seq LIMIT $2) r ON true
          WHERE o.order_id = $1`,
        [orderId, size + 1, page.after ?? 0],
      ),
    );
    if (rows.length === 0) return undefined;
    return refundPage(
      rows.filter((r): r is RefundRow & { seq: number } => r.refund_id !== null),
      size,
    );
  }

  async refund(command: RefundCommand): Promise<RefundOutcome> {
    return guard(async () => {
      // A key used before is answered from its row alone, without queueing on the order's lock:
      // retries and replays are most of the calls a busy order sees.
      const known = await this.pool.query<RefundRow>(SELECT_REFUND_BY_KEY, [command.idempotencyKey]);
      if (known.rows[0]) {
        const decision = decideRefund(command, known.rows[0], undefined);
        if ("replay" in decision) return decision.replay;
      }
      return inTransaction(this.pool, (client) => this.refundLocked(client, command), { retryIf: isUniqueViolation });
    });
  }

  private async refundLocked(client: pg.PoolClient, command: RefundCommand): Promise<RefundOutcome> {
    const order = await client.query<OrderRow>("SELECT * FROM orders WHERE order_id = $1 FOR UPDATE", [
      command.orderId,
    ]);
    // A caller that gave up while the refund queued for the order's lock (its deadline, a cancel)
    // is not refunded now that the lock is held: the throw rolls the transaction back.
    command.signal?.throwIfAborted();
    // Read again once the lock is held: READ COMMITTED gives each statement a fresh snapshot, so a
    // refund of this key committed by whoever held the lock before is visible here.
    const earlier = await client.query<RefundRow>(SELECT_REFUND_BY_KEY, [command.idempotencyKey]);
    const decision = decideRefund(command, earlier.rows[0], order.rows[0]);
    if ("replay" in decision) return decision.replay;
    const { insert: r, order: o } = decision;
    if (command.dryRun) return dryRunOutcome(r);
    const updated = await client.query(
      `WITH refund AS (${INSERT_REFUND})
       UPDATE orders
          SET amount_refunded_cents = amount_refunded_cents + $3,
              status = CASE WHEN amount_refunded_cents + $3 = amount_paid_cents THEN 'REFUNDED' ELSE status END,
              version = version + 1
        WHERE order_id = $2 AND version = $9`,
      [...refundParams(r), o.version],
    );
    if (updated.rowCount !== 1) throw new Error(`order ${o.order_id} changed inside its refund transaction`);
    const audit = breakGlassRow(command, r);
    if (audit) {
      await client.query(
        `INSERT INTO break_glass_refunds (refund_id, order_id, amount_cents, subject, key_id, reason, at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        [audit.refund_id, audit.order_id, audit.amount_cents, audit.subject, audit.key_id, audit.reason, audit.at],
      );
    }
    return insertedOutcome(r);
  }

  async breakGlassRefunds(): Promise<BreakGlassRow[]> {
    const { rows } = await guard(() =>
      this.pool.query<BreakGlassRow>(
        "SELECT refund_id, order_id, amount_cents::int AS amount_cents, subject, key_id, reason, at::float8 AS at FROM break_glass_refunds ORDER BY at, seq",
      ),
    );
    return rows;
  }

  async close(): Promise<void> {
    if (!this.pool.ended) await this.pool.end();
  }
}
