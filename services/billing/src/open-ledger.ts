// The ledger a store location names: SQLite for one process, PostgreSQL for several replicas.
import type { PostgresOptions, SchemaOptions, StoreLocation, StoreSchema } from "@loopguard/sql-store";
import type { RefundLedger } from "./ledger.js";
import { POSTGRES_LEDGER_MIGRATIONS, PostgresRefundLedger } from "./postgres-ledger.js";
import { SQLITE_LEDGER_MIGRATIONS, SqliteRefundLedger } from "./sqlite-ledger.js";

export type LedgerOptions = PostgresOptions & SchemaOptions;

/** The ledger's migrations, for the schema commands (`node dist/main.js migrate`). */
export const LEDGER_SCHEMA: StoreSchema = {
  store: "billing",
  sqlite: SQLITE_LEDGER_MIGRATIONS,
  postgres: POSTGRES_LEDGER_MIGRATIONS,
};

export function openLedger(location: StoreLocation, options: LedgerOptions = {}): Promise<RefundLedger> {
  return location.kind === "sqlite"
    ? SqliteRefundLedger.open(location.file, options)
    : PostgresRefundLedger.open(location.url, options);
}
