// RiskStore on PostgreSQL, for several risk replicas reading one table. Same schema history as
// the SQLite store (an unpeppered PostgreSQL layout never existed, so 0002 finds nothing to
// re-key there); every wait is bounded so an unreachable database is BACKEND_DOWN, never a hang.
import {
  isPostgresUnavailable,
  openMigratedPostgres,
  type PostgresMigration,
  type PostgresStoreOptions,
  postgresDriver,
} from "@loopguard/sql-store";
import type pg from "pg";
import { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";
import * as risk from "./risk-store.js";

/** QueryRisk's SLA timeout is 1.5 s: an unanswering database must become BACKEND_DOWN inside it. */
export const POSTGRES_RISK_DEFAULTS = { connectTimeoutMs: 500, statementTimeoutMs: 500, lockTimeoutMs: 500 } as const;

export function postgresRiskMigrations(
  keys: risk.CustomerKeys,
  demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
): PostgresMigration[] {
  return risk.riskMigrations<pg.ClientBase>({
    "0001-customers": async (db) => {
      await db.query(`
          CREATE TABLE customers (
            customer_key text PRIMARY KEY,
            risk_score integer NOT NULL CHECK (risk_score BETWEEN -1 AND 100),
            reason text NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
            factors jsonb NOT NULL
          )`);
    },
    "0002-peppered-customer-keys": async (db) => {
      await db.query(`
          CREATE TABLE customer_key_pepper (id integer PRIMARY KEY CHECK (id = 1), pepper_check text NOT NULL);
          CREATE TABLE customers_unkeyed (
            customer_key text PRIMARY KEY, risk_score integer NOT NULL, reason text NOT NULL, factors jsonb NOT NULL, moved_at timestamptz NOT NULL DEFAULT now()
          )`);
      const rekey = risk.demoRekeying(keys);
      for (const [legacy, peppered] of rekey)
        await db.query("UPDATE customers SET customer_key = $1 WHERE customer_key = $2", [peppered, legacy]);
      await db.query(
        `WITH moved AS (DELETE FROM customers WHERE customer_key <> ALL($1::text[]) RETURNING customer_key, risk_score, reason, factors)
           INSERT INTO customers_unkeyed (customer_key, risk_score, reason, factors) SELECT * FROM moved`,
        [[...rekey.values()]],
      );
      await db.query("INSERT INTO customer_key_pepper (id, pepper_check) VALUES (1, $1)", [keys.check]);
    },
    "0003-demo-customers": async (db) => {
      for (const row of risk.demoRows(keys, demo)) {
        await db.query(
          "INSERT INTO customers (customer_key, risk_score, reason, factors) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
          [row.key, row.score, row.reason, row.factors],
        );
      }
    },
    "0004-customer-ids": async (db) => {
      await db.query(`
          CREATE TABLE customer_ids (
            customer_id text PRIMARY KEY,
            customer_key text NOT NULL REFERENCES customers (customer_key)
          )`);
      for (const row of risk.demoCustomerIds(keys, demo)) {
        await db.query(
          "INSERT INTO customer_ids (customer_id, customer_key) SELECT $1, customer_key FROM customers WHERE customer_key = $2 ON CONFLICT DO NOTHING",
          [row.customerId, row.key],
        );
      }
    },
  });
}

/** As on SQLite, any database failure of a read means the backend cannot answer. */
const isReadFailure = (cause: unknown) =>
  isPostgresUnavailable(cause) || cause instanceof postgresDriver().DatabaseError;

export class PostgresRiskStore implements risk.RiskStore {
  available = true;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly keys: risk.CustomerKeys,
    readonly migrationsApplied: readonly string[],
  ) {}

  /**
   * Opens (migrating a new database, and seeding it with `demo`: none where demo data is off) the
   * store; refuses a database keyed with another pepper.
   */
  static async open(
    url: string,
    keys: risk.CustomerKeys,
    options: PostgresStoreOptions = {},
    demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
  ): Promise<PostgresRiskStore> {
    const { db, applied } = await openMigratedPostgres(url, "risk", postgresRiskMigrations(keys, demo), {
      ...POSTGRES_RISK_DEFAULTS,
      applicationName: "loopguard-risk",
      ...options,
    });
    const check = await db
      .query<{ pepper_check: string }>("SELECT pepper_check FROM customer_key_pepper")
      .catch(async (error: unknown) => {
        await db.end();
        throw error;
      });
    if (check.rows[0]?.pepper_check !== keys.check) {
      await db.end();
      throw risk.pepperMismatch();
    }
    return new PostgresRiskStore(db, keys, applied);
  }

  async find(idCard: string, phone: string): Promise<risk.CustomerRisk | undefined> {
    const { rows } = await this.read(() =>
      this.pool.query<{ risk_score: number; reason: string; factors: string[] }>(
        "SELECT risk_score, reason, factors FROM customers WHERE customer_key = $1",
        [this.keys.key(idCard, phone)],
      ),
    );
    const row = rows[0];
    return row ? { riskScore: row.risk_score, reason: row.reason, factors: row.factors } : undefined;
  }

  async findByCustomerId(customerId: string): Promise<risk.CustomerRisk | undefined> {
    const { rows } = await this.read(() =>
      this.pool.query<{ risk_score: number; reason: string; factors: string[] }>(
        "SELECT c.risk_score, c.reason, c.factors FROM customer_ids i JOIN customers c ON c.customer_key = i.customer_key WHERE i.customer_id = $1",
        [customerId],
      ),
    );
    const row = rows[0];
    return row ? { riskScore: row.risk_score, reason: row.reason, factors: row.factors } : undefined;
  }

  async size(): Promise<number> {
    return (await this.read(() => this.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM customers"))).rows[0]!
      .n;
  }

  async unkeyedCount(): Promise<number> {
    return (await this.read(() => this.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM customers_unkeyed")))
      .rows[0]!.n;
  }

  async close(): Promise<void> {
    if (!this.pool.ended) await this.pool.end();
  }

  private read<T>(work: () => Promise<T>): Promise<T> {
    return risk.readStore({ available: this.available, closed: this.pool.ended }, isReadFailure, work);
  }
}
