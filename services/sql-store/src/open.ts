// A store's database, opened and brought up to its schema in one call: what every store's
// `open` does before it prepares its statements.
import type Database from "better-sqlite3";
import type pg from "pg";
import { migratePostgres, migrateSqlite, type PostgresMigrateOptions, type PostgresMigration, type SqliteMigration } from "./migrate.js";
import { createPostgresPool } from "./postgres.js";
import { explainPostgresTlsError } from "./postgres-tls.js";
import { openSqlite, type SqliteOptions } from "./sqlite.js";

export interface Migrated<Db> {
  readonly db: Db;
  /** Names of the migrations this call applied (empty when the schema was current). */
  readonly applied: readonly string[];
}

export async function openMigratedSqlite(file: string, store: string, migrations: readonly SqliteMigration[], options: SqliteOptions = {}): Promise<Migrated<Database.Database>> {
  const db = openSqlite(file, options);
  try {
    return { db, applied: await migrateSqlite(db, store, migrations) };
  } catch (error) {
    db.close();
    throw error;
  }
}

export async function openMigratedPostgres(url: string, store: string, migrations: readonly PostgresMigration[], options: PostgresMigrateOptions = {}): Promise<Migrated<pg.Pool>> {
  // The first connection a store makes: a TLS setup that does not work fails here, said plainly.
  const applied = await migratePostgres(url, store, migrations, options).catch((error: unknown) => {
    throw explainPostgresTlsError(error, url);
  });
  return { db: createPostgresPool(url, options), applied };
}
