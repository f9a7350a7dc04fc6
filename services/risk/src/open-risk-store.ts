// The risk store a store location names: SQLite for one process, PostgreSQL for several replicas.
import type { PostgresOptions, SchemaOptions, StoreLocation, StoreSchema } from "@loopguard/sql-store";
import { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";
import { PostgresRiskStore, postgresRiskMigrations } from "./postgres-risk-store.js";
import { type CustomerKeys, MIN_PEPPER_LENGTH, type RiskStore } from "./risk-store.js";
import { SqliteRiskStore, sqliteRiskMigrations } from "./sqlite-risk-store.js";

/**
 * The store's migrations for the schema commands (`node dist/main.js migrate`); they key the
 * customers of `demo` with `keys` (none where RISK_SEED_DEMO=false: the seeding is a migration).
 */
export function riskSchema(keys: CustomerKeys, demo: readonly DemoCustomer[] = DEMO_CUSTOMERS): StoreSchema {
  return { store: "risk", sqlite: sqliteRiskMigrations(keys, demo), postgres: postgresRiskMigrations(keys, demo) };
}

/** A pepper that only lets the list be built, for `migrations` (names and declarations; nothing runs). */
export const LISTING_PEPPER = "listing-only-".padEnd(MIN_PEPPER_LENGTH, "x");

/** `demo` seeds a new store (the demo customers by default; none where RISK_SEED_DEMO=false). */
export function openRiskStore(
  location: StoreLocation,
  keys: CustomerKeys,
  options: PostgresOptions & SchemaOptions = {},
  demo: readonly DemoCustomer[] = DEMO_CUSTOMERS,
): Promise<RiskStore> {
  return location.kind === "sqlite"
    ? SqliteRiskStore.open(location.file, keys, options.migrate === undefined ? {} : { migrate: options.migrate }, demo)
    : PostgresRiskStore.open(location.url, keys, options, demo);
}
