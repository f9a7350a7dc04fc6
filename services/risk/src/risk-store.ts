// Customer risk scores in SQLite, keyed by a SHA-256 hash of (id card, E.164 phone) so the
// database never holds either raw value. A new database is seeded with the demo customers.
import { createHash } from "node:crypto";
import Database from "better-sqlite3";
import { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";

export interface CustomerRisk {
  /** -1 .. 100; -1 when the score could not be computed. */
  readonly riskScore: number;
  /** Operator-readable; never contains the id card or phone. */
  readonly reason: string;
  readonly factors: string[];
}

/** The store cannot be read right now; the caller may try again later. */
export class RiskStoreUnavailableError extends Error {
  override readonly name = "RiskStoreUnavailableError";
}

const SCHEMA_VERSION = 1;

/** Hex SHA-256 of the canonical id card and E.164 phone, the only identity the store keeps. */
export function customerKey(idCard: string, phone: string): string {
  return createHash("sha256").update(`${idCard}\n${phone}`).digest("hex");
}

interface CustomerRow {
  readonly risk_score: number;
  readonly reason: string;
  readonly factors: string;
}

export class RiskStore {
  /**
   * False makes every read fail as if the backend were down; drills and tests flip it to
   * exercise the BACKEND_DOWN path without damaging the database.
   */
  available = true;
  readonly #db: Database.Database;
  readonly #select: Database.Statement<[string], CustomerRow>;

  private constructor(db: Database.Database) {
    this.#db = db;
    this.#select = db.prepare<[string], CustomerRow>("SELECT risk_score, reason, factors FROM customers WHERE customer_key = ?");
  }

  /** Opens (creating and seeding on first start) the store at `file`. */
  static open(file: string, seed: readonly DemoCustomer[] = DEMO_CUSTOMERS): RiskStore {
    const db = new Database(file);
    try {
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = NORMAL");
      db.pragma("busy_timeout = 1000");
      migrate(db, seed);
      return new RiskStore(db);
    } catch (error) {
      db.close();
      throw error;
    }
  }

  /** The customer's risk, or undefined when no customer has this id card and phone. */
  find(idCard: string, phone: string): CustomerRisk | undefined {
    if (!this.available) throw new RiskStoreUnavailableError("the risk store is switched off");
    if (!this.#db.open) throw new RiskStoreUnavailableError("the risk store is closed");
    let row: CustomerRow | undefined;
    try {
      row = this.#select.get(customerKey(idCard, phone));
    } catch (cause) {
      if (cause instanceof Database.SqliteError) throw new RiskStoreUnavailableError("the risk store cannot be read", { cause });
      throw cause;
    }
    if (!row) return undefined;
    return { riskScore: row.risk_score, reason: row.reason, factors: JSON.parse(row.factors) as string[] };
  }

  /** Number of customers stored. */
  size(): number {
    return this.#db.prepare<[], { n: number }>("SELECT count(*) AS n FROM customers").get()!.n;
  }

  /** Idempotent, so both a test and the server's shutdown may call it. */
  close(): void {
    if (this.#db.open) this.#db.close();
  }
}

function migrate(db: Database.Database, seed: readonly DemoCustomer[]): void {
  db.transaction(() => {
    const version = db.pragma("user_version", { simple: true }) as number;
    if (version >= SCHEMA_VERSION) return;
    db.exec(`
      CREATE TABLE customers (
        customer_key TEXT PRIMARY KEY,
        risk_score INTEGER NOT NULL CHECK (risk_score BETWEEN -1 AND 100),
        reason TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
        factors TEXT NOT NULL
      ) STRICT, WITHOUT ROWID;
    `);
    const insert = db.prepare("INSERT INTO customers (customer_key, risk_score, reason, factors) VALUES (?, ?, ?, ?)");
    for (const c of seed) insert.run(customerKey(c.idCard, c.phone), c.riskScore, c.reason, JSON.stringify(c.factors));
    db.pragma(`user_version = ${SCHEMA_VERSION}`);
  }).immediate();
}
