// A store's database, opened and brought up to (or checked against) its schema in one call: what
// every store's `open` does before it prepares its statements, and what the migrate step does alone.
import type Database from "better-sqlite3";
import type pg from "pg";
import {
  migratePostgres,
  migrateSqlite,
  type PostgresMigrateOptions,
  type PostgresMigration,
  type SqliteMigration,
} from "./migrate.js";
import { createPostgresPool } from "./postgres.js";
import { explainPostgresTlsError } from "./postgres-tls.js";
import { assessSchema, postgresLedger, requireCurrent, type StoreSchema, sqliteLedger } from "./schema.js";
import { openSqlite, type SqliteOptions } from "./sqlite.js";
import type { StoreLocation } from "./store-url.js";

export interface Migrated<Db> {
  readonly db: Db;
  /** Names of the migrations this call applied (empty when the schema was current, or only checked). */
  readonly applied: readonly string[];
}

export interface SchemaOptions {
  /**
   * Apply pending migrations (default: one local process) or only check that the schema is
   * current and throw SchemaNotCurrentError otherwise (pods, after the migration step).
   */
  readonly migrate?: boolean;
}

/** How a store opens its PostgreSQL database: the pool's and the migration's bounds, and whether to migrate. */
export type PostgresStoreOptions = PostgresMigrateOptions & SchemaOptions;

export async function openMigratedSqlite(
  file: string,
  store: string,
  migrations: readonly SqliteMigration[],
  options: SqliteOptions & SchemaOptions = {},
): Promise<Migrated<Database.Database>> {
  const db = openSqlite(file, options);
  try {
    if (options.migrate === false) {
      requireCurrent(assessSchema(store, migrations, sqliteLedger(db, store)));
      return { db, applied: [] };
    }
    return { db, applied: await migrateSqlite(db, store, migrations) };
  } catch (error) {
    db.close();
    throw error;
  }
}

/** Checks the schema on `pool`: what a serving process does instead of migrating. */
export async function requireCurrentPostgres(
  pool: pg.Pool,
  store: string,
  migrations: readonly PostgresMigration[],
): Promise<void> {
  requireCurrent(assessSchema(store, migrations, await postgresLedger(pool, store)));
}

export async function openMigratedPostgres(
  url: string,
  store: string,
  migrations: readonly PostgresMigration[],
  options: PostgresStoreOptions = {},
): Promise<Migrated<pg.Pool>> {
  // The first connection a store makes: a TLS setup that does not work fails here, said plainly.
  if (options.migrate !== false) {
    const applied = await migratePostgres(url, store, migrations, options).catch((error: unknown) => {
      throw explainPostgresTlsError(error, url);
    });
    return { db: createPostgresPool(url, options), applied };
  }
  const pool = createPostgresPool(url, options);
  try {
    await requireCurrentPostgres(pool, store, migrations);
  } catch (error) {
    await pool.end();
    throw explainPostgresTlsError(error, url);
  }
  return { db: pool, applied: [] };
}

/** Applies the store's pending migrations where `location` points and returns their names. */
export async function migrateStore(
  location: StoreLocation,
  schema: StoreSchema,
  options: SqliteOptions & PostgresMigrateOptions = {},
): Promise<readonly string[]> {
  if (location.kind === "postgres") return migratePostgres(location.url, schema.store, schema.postgres, options);
  const { db, applied } = await openMigratedSqlite(location.file, schema.store, schema.sqlite, options);
  db.close();
  return applied;
}
