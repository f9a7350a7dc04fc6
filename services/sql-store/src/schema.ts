// A store's schema as a build sees it: applying its migrations is one step of a release (the
// migrate Job, `node dist/main.js migrate`), and a serving process only checks that the database
// holds every migration it needs and none it cannot run on (a contract migration of a later
// release whose expand step this build lacks). It never migrates on its own in a cluster: a
// pod killed mid-migration by its startup probe would roll back and start over forever.
import type Database from "better-sqlite3";
import type pg from "pg";
import {
  type MigrationDeclaration,
  MIGRATIONS_TABLE,
  type PostgresMigrateOptions,
  type PostgresMigration,
  type SqliteMigration,
} from "./migrate.js";
import { postgresClientConfig, unpooledClient } from "./postgres.js";
import { openSqlite } from "./sqlite.js";
import type { StoreLocation } from "./store-url.js";

/** A store's migrations for both databases (the dialects differ; the names and declarations match). */
export interface StoreSchema {
  /** Its name in the ledger, e.g. "billing". */
  readonly store: string;
  readonly sqlite: readonly SqliteMigration[];
  readonly postgres: readonly PostgresMigration[];
}

/** A ledger row: a declaration, or only a name for rows an older build recorded. */
export interface AppliedMigration {
  readonly name: string;
  readonly compatibility: "expand" | "contract" | null;
  readonly after: string | null;
}

export interface SchemaAssessment {
  readonly store: string;
  /** Migrations this build needs that the database lacks, in order. */
  readonly pending: readonly string[];
  /** Applied migrations this build does not know (a later release's) and cannot run on. */
  readonly incompatible: readonly AppliedMigration[];
}

/** The schema is not one this build may serve on; the message says which migrations and what to do. */
export class SchemaNotCurrentError extends Error {
  override readonly name = "SchemaNotCurrentError";
  constructor(
    message: string,
    readonly assessment: SchemaAssessment,
  ) {
    super(message);
  }
}

/**
 * Whether a build with `migrations` may run on a database that applied `applied`. A later
 * release's expand migration is fine; its contract migration is fine only when its expand step
 * (`after`) is one this build has, since this build then already runs without what it removed.
 */
export function assessSchema(
  store: string,
  migrations: readonly MigrationDeclaration[],
  applied: readonly AppliedMigration[],
): SchemaAssessment {
  const done = new Set(applied.map((m) => m.name));
  const known = new Set(migrations.map((m) => m.name));
  return {
    store,
    pending: migrations.filter((m) => !done.has(m.name)).map((m) => m.name),
    incompatible: applied.filter(
      (m) => !known.has(m.name) && m.compatibility === "contract" && !(m.after !== null && known.has(m.after)),
    ),
  };
}

/** Why the build may not serve on the assessed schema, or undefined when it may. */
export function schemaProblem(assessment: SchemaAssessment): string | undefined {
  const { store, pending, incompatible } = assessment;
  if (incompatible.length > 0) {
    return `the ${store} schema has contract migration(s) of a later release that this build cannot run on (${incompatible.map((m) => m.name).join(", ")}): run that release's image, not this one`;
  }
  if (pending.length > 0) {
    return (
      `the ${store} schema lacks ${pending.length} migration(s) this build needs (${pending.join(", ")}): run the migration step first ` +
      "(`node dist/main.js migrate` with the same store, the service's migrate Job on Kubernetes); serving processes do not migrate"
    );
  }
  return undefined;
}

/** Throws SchemaNotCurrentError unless the build may serve on the assessed schema. */
export function requireCurrent(assessment: SchemaAssessment): void {
  const problem = schemaProblem(assessment);
  if (problem) throw new SchemaNotCurrentError(problem, assessment);
}

interface LedgerRow {
  name: string;
  compatibility: string | null;
  contract_after: string | null;
}

const rowOf = (r: LedgerRow): AppliedMigration => ({
  name: r.name,
  compatibility: r.compatibility === "expand" || r.compatibility === "contract" ? r.compatibility : null,
  after: r.contract_after,
});

export function sqliteLedger(db: Database.Database, store: string): AppliedMigration[] {
  const columns = new Set(
    db.prepare<[], string>(`SELECT name FROM pragma_table_info('${MIGRATIONS_TABLE}')`).pluck().all(),
  );
  if (columns.size === 0) return [];
  const declared = columns.has("compatibility")
    ? "compatibility, contract_after"
    : "NULL AS compatibility, NULL AS contract_after";
  return db
    .prepare<[string], LedgerRow>(
      `SELECT name, ${declared} FROM ${MIGRATIONS_TABLE} WHERE store = ? ORDER BY applied_at, name`,
    )
    .all(store)
    .map(rowOf);
}

export async function postgresLedger(client: pg.ClientBase | pg.Pool, store: string): Promise<AppliedMigration[]> {
  const { rows } = await client.query<{ columns: string[] | null }>(
    "SELECT array_agg(column_name::text) AS columns FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1",
    [MIGRATIONS_TABLE],
  );
  const columns = new Set(rows[0]?.columns ?? []);
  if (columns.size === 0) return [];
  const declared = columns.has("compatibility")
    ? "compatibility, contract_after"
    : "NULL AS compatibility, NULL AS contract_after";
  return (
    await client.query<LedgerRow>(
      `SELECT name, ${declared} FROM ${MIGRATIONS_TABLE} WHERE store = $1 ORDER BY applied_at, name`,
      [store],
    )
  ).rows.map(rowOf);
}

/** What the database where `location` points holds, against what this build needs; reads only. */
export async function assessStore(
  location: StoreLocation,
  schema: StoreSchema,
  options: PostgresMigrateOptions = {},
): Promise<SchemaAssessment> {
  if (location.kind === "sqlite") {
    const db = openSqlite(location.file);
    try {
      return assessSchema(schema.store, schema.sqlite, sqliteLedger(db, schema.store));
    } finally {
      db.close();
    }
  }
  const client = unpooledClient(
    postgresClientConfig(location.url, { applicationName: `loopguard-${schema.store}-schema`, ...options }),
  );
  await client.connect();
  try {
    return assessSchema(schema.store, schema.postgres, await postgresLedger(client, schema.store));
  } finally {
    await client.end();
  }
}
