// RiskStore on one SQLite file (WAL, synchronous=NORMAL: the data is reseedable, and reads
// dominate). Files made before migrations existed (layout `user_version` 1, bare SHA-256 keys)
// are adopted by 0001 and re-keyed by 0002.
import { openMigratedSqlite, type SchemaOptions, type SqliteMigration } from "@loopguard/sql-store";
import Database from "better-sqlite3";
import { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";
import * as risk from "./risk-store.js";

interface CustomerRow {
  readonly risk_score: number;
  readonly reason: string;
  readonly factors: string;
}

export function sqliteRiskMigrations(
  keys: risk.CustomerKeys,
  demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
): SqliteMigration[] {
  return risk.riskMigrations<Database.Database>({
    "0001-customers": (db) => {
      db.exec(`
          CREATE TABLE IF NOT EXISTS customers (
            customer_key TEXT PRIMARY KEY,
            risk_score INTEGER NOT NULL CHECK (risk_score BETWEEN -1 AND 100),
            reason TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
            factors TEXT NOT NULL
          ) STRICT, WITHOUT ROWID;`);
    },
    "0002-peppered-customer-keys": (db) => {
      db.exec(`
          CREATE TABLE customer_key_pepper (id INTEGER PRIMARY KEY CHECK (id = 1), pepper_check TEXT NOT NULL) STRICT;
          CREATE TABLE customers_unkeyed (
            customer_key TEXT PRIMARY KEY, risk_score INTEGER NOT NULL, reason TEXT NOT NULL, factors TEXT NOT NULL, moved_at INTEGER NOT NULL
          ) STRICT;`);
      const rekey = risk.demoRekeying(keys);
      const update = db.prepare("UPDATE customers SET customer_key = ? WHERE customer_key = ?");
      for (const [legacy, peppered] of rekey) update.run(peppered, legacy);
      const peppered = JSON.stringify([...rekey.values()]);
      const others = "FROM customers WHERE customer_key NOT IN (SELECT value FROM json_each(?))";
      db.prepare(`INSERT INTO customers_unkeyed SELECT customer_key, risk_score, reason, factors, ? ${others}`).run(
        Date.now(),
        peppered,
      );
      db.prepare(`DELETE ${others}`).run(peppered);
      db.prepare("INSERT INTO customer_key_pepper (id, pepper_check) VALUES (1, ?)").run(keys.check);
    },
    "0003-demo-customers": (db) => {
      const insert = db.prepare(
        "INSERT OR IGNORE INTO customers (customer_key, risk_score, reason, factors) VALUES (@key, @score, @reason, @factors)",
      );
      for (const row of risk.demoRows(keys, demo)) insert.run(row);
    },
    "0004-customer-ids": (db) => {
      db.exec(`
          CREATE TABLE customer_ids (
            customer_id TEXT PRIMARY KEY,
            customer_key TEXT NOT NULL REFERENCES customers (customer_key)
          ) STRICT, WITHOUT ROWID;`);
      const insert = db.prepare(
        "INSERT OR IGNORE INTO customer_ids (customer_id, customer_key) SELECT @customerId, customer_key FROM customers WHERE customer_key = @key",
      );
      for (const row of risk.demoCustomerIds(keys, demo)) insert.run(row);
    },
  });
}

/** Any SQLite failure of a read (I/O, corruption, a missing table) means the backend cannot answer. */
const isReadFailure = (cause: unknown) => cause instanceof Database.SqliteError;

export class SqliteRiskStore implements risk.RiskStore {
  available = true;
  readonly #db: Database.Database;
  readonly #keys: risk.CustomerKeys;
  readonly #select: Database.Statement<[string], CustomerRow>;
  readonly #selectByCustomerId: Database.Statement<[string], CustomerRow>;

  private constructor(
    db: Database.Database,
    keys: risk.CustomerKeys,
    readonly migrationsApplied: readonly string[],
  ) {
    this.#db = db;
    this.#keys = keys;
    this.#select = db.prepare<[string], CustomerRow>(
      "SELECT risk_score, reason, factors FROM customers WHERE customer_key = ?",
    );
    this.#selectByCustomerId = db.prepare<[string], CustomerRow>(
      "SELECT c.risk_score, c.reason, c.factors FROM customer_ids i JOIN customers c ON c.customer_key = i.customer_key WHERE i.customer_id = ?",
    );
  }

  /**
   * Opens (creating and migrating on first start, seeding with `demo`: none where demo data is
   * off) the store at `file`; refuses a database keyed with another pepper.
   */
  static async open(
    file: string,
    keys: risk.CustomerKeys,
    options: SchemaOptions = {},
    demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
  ): Promise<SqliteRiskStore> {
    const { db, applied } = await openMigratedSqlite(file, "risk", sqliteRiskMigrations(keys, demo), {
      synchronous: "NORMAL",
      busyTimeoutMs: 1000,
      ...options,
    });
    if (db.prepare<[], string>("SELECT pepper_check FROM customer_key_pepper").pluck().get() !== keys.check) {
      db.close();
      throw risk.pepperMismatch();
    }
    return new SqliteRiskStore(db, keys, applied);
  }

  async find(idCard: string, phone: string): Promise<risk.CustomerRisk | undefined> {
    const row = await this.#read(() => this.#select.get(this.#keys.key(idCard, phone)));
    if (!row) return undefined;
    return { riskScore: row.risk_score, reason: row.reason, factors: JSON.parse(row.factors) as string[] };
  }

  async findByCustomerId(customerId: string): Promise<risk.CustomerRisk | undefined> {
    const row = await this.#read(() => this.#selectByCustomerId.get(customerId));
    if (!row) return undefined;
    return { riskScore: row.risk_score, reason: row.reason, factors: JSON.parse(row.factors) as string[] };
  }

  async size(): Promise<number> {
    return this.#read(() => this.#db.prepare<[], number>("SELECT count(*) FROM customers").pluck().get()!);
  }

  async unkeyedCount(): Promise<number> {
    return this.#read(() => this.#db.prepare<[], number>("SELECT count(*) FROM customers_unkeyed").pluck().get()!);
  }

  async close(): Promise<void> {
    if (this.#db.open) this.#db.close();
  }

  #read<T>(work: () => T): Promise<T> {
    return risk.readStore({ available: this.available, closed: !this.#db.open }, isReadFailure, work);
  }
}
