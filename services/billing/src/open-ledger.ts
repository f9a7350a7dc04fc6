// The ledger a store location names: SQLite for one process, PostgreSQL for several replicas.
import type { PostgresOptions, StoreLocation } from "@loopguard/sql-store";
import type { RefundLedger } from "./ledger.js";
import { PostgresRefundLedger } from "./postgres-ledger.js";
import { SqliteRefundLedger } from "./sqlite-ledger.js";

export type LedgerOptions = PostgresOptions;

export function openLedger(location: StoreLocation, options: LedgerOptions = {}): Promise<RefundLedger> {
  return location.kind === "sqlite" ? SqliteRefundLedger.open(location.file, options) : PostgresRefundLedger.open(location.url, options);
}
