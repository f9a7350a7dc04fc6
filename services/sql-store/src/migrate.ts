// Versioned schema migrations, run by umzug for both databases. Each database records what it has
// applied in one table, per store (billing and risk may share a PostgreSQL database), and all
// pending migrations of a store run in one transaction under a lock: replicas starting at once
// migrate once (the others wait, then find nothing pending), and a failed migration leaves the
// database as it was. Each migration declares whether the release before it can still run on the
// schema it leaves (expand/contract, see Compatibility); the ledger records that beside its name,
// so an older build can tell a schema it may run on from one it must refuse (schema.ts).
import { createHash } from "node:crypto";
import { resolve } from "node:path";
import type Database from "better-sqlite3";
import type pg from "pg";
import { type PostgresOptions, postgresClientConfig, unpooledClient } from "./postgres.js";
import { Turns } from "./turns.js";

/**
 * Whether code released before a migration runs on the schema it leaves, which decides whether
 * a blue-green release may apply it while the previous colour still serves.
 */
export type Compatibility =
  /** Adds only (tables, nullable or defaulted columns, indexes, wider checks, rows): earlier code runs on. */
  | { readonly compatibility: "expand" }
  /**
   * Removes or changes what earlier code uses (a drop, a rename, data moved or re-keyed, a tighter
   * check). `after` names the earlier migration (the expand step) whose release already runs
   * without what this one removes: a live release that has it may keep serving while this one
   * applies. Without `after`, no earlier release may.
   */
  | { readonly compatibility: "contract"; readonly after?: string };

export type Migration<Db> = Compatibility & {
  /** Unique within its store and never renamed once released, e.g. "0001-orders-and-refunds"; they run in list order. */
  readonly name: string;
  up(db: Db): void | Promise<void>;
};

/** A migration's name and declaration, as the ledger records it and an image lists it. */
export type MigrationDeclaration = Compatibility & { readonly name: string };

export function declarationOf(migration: MigrationDeclaration): MigrationDeclaration {
  const { name } = migration;
  return migration.compatibility === "expand"
    ? { name, compatibility: "expand" }
    : { name, compatibility: "contract", ...(migration.after ? { after: migration.after } : {}) };
}

/** Throws when names repeat or a contract's `after` names no earlier migration of the list. */
export function checkMigrationList(migrations: readonly MigrationDeclaration[]): void {
  const seen = new Set<string>();
  for (const m of migrations) {
    if (seen.has(m.name)) throw new Error(`two migrations share the name ${m.name}`);
    if (m.compatibility === "contract" && m.after !== undefined && !seen.has(m.after)) {
      throw new Error(`migration ${m.name}: its expand step "${m.after}" is not an earlier migration of the same list`);
    }
    seen.add(m.name);
  }
}

export type SqliteMigration = Migration<Database.Database>;
export type PostgresMigration = Migration<pg.ClientBase>;

export const MIGRATIONS_TABLE = "loopguard_schema_migrations";

/** The ledger's columns for a declaration; rows recorded before declarations existed are filled in by the next run. */
const LEDGER_DECLARATION_COLUMNS = ["compatibility", "contract_after"] as const;
const declarationColumns = (m: MigrationDeclaration): [string, string | null] => [
  m.compatibility,
  m.compatibility === "contract" ? (m.after ?? null) : null,
];

interface Ledger {
  applied(): Promise<string[]>;
  record(name: string): Promise<void>;
  forget(name: string): Promise<void>;
}

/** Whether the ledger lists every migration already, the usual start: then umzug is not even loaded. */
function allApplied(migrations: readonly Migration<object>[], ledger: readonly string[]): boolean {
  checkMigrationList(migrations);
  const done = new Set(ledger);
  return migrations.every((m) => done.has(m.name));
}

async function runPending<Db extends object>(
  db: Db,
  migrations: readonly Migration<Db>[],
  ledger: Ledger,
): Promise<string[]> {
  // Loaded when a migration runs: umzug brings its command line's libraries (~0.2 s of CPU), which
  // a process that only checks its schema (a pod that does not migrate on start) or has none never needs.
  const { Umzug } = await import("umzug");
  const umzug = new Umzug<{ db: Db }>({
    migrations: migrations.map((m) => ({ name: m.name, up: async ({ context }) => m.up(context.db) })),
    context: { db },
    storage: {
      executed: () => ledger.applied(),
      logMigration: ({ name }) => ledger.record(name),
      unlogMigration: ({ name }) => ledger.forget(name),
    },
    logger: undefined,
  });
  return (await umzug.up()).map((m) => m.name);
}

/**
 * Migrations of one SQLite file in one process take turns: a migration holds the write lock
 * across awaits, and BEGIN IMMEDIATE blocks the thread while it waits, so a second connection's
 * write in that time would stall the very event loop the first one needs to finish.
 */
const sqliteTurns = new Turns<string>();

/** Runs `work` in the turn of `db`'s file, the one its migrations take: for what a store writes as it opens. */
export function inSqliteTurn<T>(db: Database.Database, work: () => T | Promise<T>): Promise<T> {
  return sqliteTurns.take(db.memory ? db.name : resolve(db.name), async () => work());
}

/**
 * Applies the store's pending migrations to a SQLite database and returns their names. The lock
 * is SQLite's write lock (BEGIN IMMEDIATE), waited for up to the connection's busy timeout.
 * `afterwards` runs in the same turn, once the migrations committed.
 */
export function migrateSqlite(
  db: Database.Database,
  store: string,
  migrations: readonly SqliteMigration[],
  afterwards?: () => void,
): Promise<string[]> {
  return inSqliteTurn(db, async () => {
    const applied = await migrateSqliteLocked(db, store, migrations);
    afterwards?.();
    return applied;
  });
}

async function migrateSqliteLocked(
  db: Database.Database,
  store: string,
  migrations: readonly SqliteMigration[],
): Promise<string[]> {
  // A layout change may rebuild tables others refer to; foreign keys switch only outside a transaction.
  const foreignKeys = db.pragma("foreign_keys", { simple: true }) as number;
  db.pragma("foreign_keys = OFF");
  db.exec("BEGIN IMMEDIATE");
  try {
    db.exec(`CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (
      store TEXT NOT NULL, name TEXT NOT NULL, applied_at INTEGER NOT NULL, PRIMARY KEY (store, name)) STRICT`);
    const columns = new Set(
      db.prepare<[], string>(`SELECT name FROM pragma_table_info('${MIGRATIONS_TABLE}')`).pluck().all(),
    );
    for (const column of LEDGER_DECLARATION_COLUMNS)
      if (!columns.has(column)) db.exec(`ALTER TABLE ${MIGRATIONS_TABLE} ADD COLUMN ${column} TEXT`);
    const byName = new Map(migrations.map((m) => [m.name, m]));
    const ledger = () =>
      db
        .prepare<[string], string>(`SELECT name FROM ${MIGRATIONS_TABLE} WHERE store = ? ORDER BY applied_at, name`)
        .pluck()
        .all(store);
    // Nothing pending, the usual open: no await while the write lock is held (see sqliteTurns).
    const applied = allApplied(migrations, ledger())
      ? []
      : await runPending(db, migrations, {
          applied: async () => ledger(),
          record: async (name) =>
            void db
              .prepare(
                `INSERT INTO ${MIGRATIONS_TABLE} (store, name, applied_at, compatibility, contract_after) VALUES (?, ?, ?, ?, ?)`,
              )
              .run(store, name, Date.now(), ...declarationColumns(byName.get(name)!)),
          forget: async (name) =>
            void db.prepare(`DELETE FROM ${MIGRATIONS_TABLE} WHERE store = ? AND name = ?`).run(store, name),
        });
    const fill = db.prepare(
      `UPDATE ${MIGRATIONS_TABLE} SET compatibility = ?, contract_after = ? WHERE store = ? AND name = ? AND compatibility IS NULL`,
    );
    for (const m of migrations) fill.run(...declarationColumns(m), store, m.name);
    db.exec("COMMIT");
    return applied;
  } catch (error) {
    if (db.inTransaction) db.exec("ROLLBACK");
    throw error;
  } finally {
    db.pragma(`foreign_keys = ${foreignKeys ? "ON" : "OFF"}`);
  }
}

/** Advisory lock keys: a fixed class for loopguard migrations, and one key per store. */
const LOCK_CLASS = 0x4c474d;
function lockKey(store: string): number {
  return createHash("sha256").update(store).digest().readInt32BE(0);
}

/** The two-key advisory lock a store's migrations hold, e.g. for `SELECT pg_advisory_lock($1, $2)` in a test. */
export function migrationLock(store: string): [number, number] {
  return [LOCK_CLASS, lockKey(store)];
}

export interface PostgresMigrateOptions extends PostgresOptions {
  /** Bounds waiting for another replica's migration and each migration statement. */
  readonly migrationTimeoutMs?: number;
}

/**
 * Applies the store's pending migrations to a PostgreSQL database on a connection of its own and
 * returns their names. The lock is a transaction-scoped advisory lock, so a replica that dies
 * mid-migration releases it with its connection.
 */
export async function migratePostgres(
  url: string,
  store: string,
  migrations: readonly PostgresMigration[],
  options: PostgresMigrateOptions = {},
): Promise<string[]> {
  const timeoutMs = options.migrationTimeoutMs ?? 300_000;
  const config = postgresClientConfig(url, { ...options, statementTimeoutMs: timeoutMs, lockTimeoutMs: timeoutMs });
  const client = unpooledClient({ ...config, query_timeout: timeoutMs + 1000 });
  await client.connect();
  try {
    await client.query("BEGIN");
    await client.query(`SET LOCAL statement_timeout = ${timeoutMs}; SET LOCAL lock_timeout = ${timeoutMs}`);
    await client.query("SELECT pg_advisory_xact_lock($1, $2)", [LOCK_CLASS, lockKey(store)]);
    await client.query(`CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (
      store text NOT NULL, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (store, name));
      ALTER TABLE ${MIGRATIONS_TABLE} ${LEDGER_DECLARATION_COLUMNS.map((c) => `ADD COLUMN IF NOT EXISTS ${c} text`).join(", ")}`);
    const byName = new Map(migrations.map((m) => [m.name, m]));
    const ledger = async () =>
      (
        await client.query<{ name: string }>(
          `SELECT name FROM ${MIGRATIONS_TABLE} WHERE store = $1 ORDER BY applied_at, name`,
          [store],
        )
      ).rows.map((r) => r.name);
    const applied = allApplied(migrations, await ledger())
      ? []
      : await runPending(client, migrations, {
          applied: ledger,
          record: async (name) =>
            void (await client.query(
              `INSERT INTO ${MIGRATIONS_TABLE} (store, name, compatibility, contract_after) VALUES ($1, $2, $3, $4)`,
              [store, name, ...declarationColumns(byName.get(name)!)],
            )),
          forget: async (name) =>
            void (await client.query(`DELETE FROM ${MIGRATIONS_TABLE} WHERE store = $1 AND name = $2`, [store, name])),
        });
    for (const m of migrations) {
      await client.query(
        `UPDATE ${MIGRATIONS_TABLE} SET compatibility = $1, contract_after = $2 WHERE store = $3 AND name = $4 AND compatibility IS NULL`,
        [...declarationColumns(m), store, m.name],
      );
    }
    await client.query("COMMIT");
    return applied;
  } catch (error) {
    // The original error is the one worth reporting; a connection too broken to roll back is ended below anyway.
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
}
