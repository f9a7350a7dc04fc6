// The risk store a store location names: SQLite for one process, PostgreSQL for several replicas.
import type { PostgresOptions, StoreLocation } from "@loopguard/sql-store";
import { DEMO_CUSTOMERS, type DemoCustomer } from "./demo-customers.js";
import { PostgresRiskStore } from "./postgres-risk-store.js";
import type { CustomerKeys, RiskStore } from "./risk-store.js";
import { SqliteRiskStore } from "./sqlite-risk-store.js";

/** `demo` seeds a new store (the demo customers by default; none where RISK_SEED_DEMO=false). */
export function openRiskStore(location: StoreLocation, keys: CustomerKeys, options: PostgresOptions = {}, demo: readonly DemoCustomer[] = DEMO_CUSTOMERS): Promise<RiskStore> {
  return location.kind === "sqlite" ? SqliteRiskStore.open(location.file, keys, demo) : PostgresRiskStore.open(location.url, keys, options, demo);
}
