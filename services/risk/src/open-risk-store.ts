// The risk store a store location names: SQLite for one process, PostgreSQL for several replicas.
import type { PostgresOptions, SchemaOptions, StoreLocation, StoreSchema } from "@loopguard/sql-store";
import { PostgresRiskStore, postgresRiskMigrations } from "./postgres-risk-store.js";
import { type CustomerKeys, MIN_PEPPER_LENGTH, type RiskStore } from "./risk-store.js";
import { SqliteRiskStore, sqliteRiskMigrations } from "./sqlite-risk-store.js";

/** The store's migrations for the schema commands (`node dist/main.js migrate`); they key the demo customers with `keys`. */
export function riskSchema(keys: CustomerKeys): StoreSchema {
  return { store: "risk", sqlite: sqliteRiskMigrations(keys), postgres: postgresRiskMigrations(keys) };
}

/** A pepper that only lets the list be built, for `migrations` (names and declarations; nothing runs). */
export const LISTING_PEPPER = "listing-only-".padEnd(MIN_PEPPER_LENGTH, "x");

export function openRiskStore(location: StoreLocation, keys: CustomerKeys, options: PostgresOptions & SchemaOptions = {}): Promise<RiskStore> {
  return location.kind === "sqlite"
    ? SqliteRiskStore.open(location.file, keys, options.migrate === undefined ? {} : { migrate: options.migrate })
    : PostgresRiskStore.open(location.url, keys, options);
}
