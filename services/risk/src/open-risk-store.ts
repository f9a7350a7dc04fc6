// The risk store a store location names: SQLite for one process, PostgreSQL for several replicas.
import type { PostgresOptions, StoreLocation } from "@loopguard/sql-store";
import { PostgresRiskStore } from "./postgres-risk-store.js";
import type { CustomerKeys, RiskStore } from "./risk-store.js";
import { SqliteRiskStore } from "./sqlite-risk-store.js";

export function openRiskStore(location: StoreLocation, keys: CustomerKeys, options: PostgresOptions = {}): Promise<RiskStore> {
  return location.kind === "sqlite" ? SqliteRiskStore.open(location.file, keys) : PostgresRiskStore.open(location.url, keys, options);
}
