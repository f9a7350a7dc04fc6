// Picks the SessionStore implementation from one URL, so deployment config names a store the
// same way whichever backend it is: `sqlite:/var/lib/loopguard/sessions.db` (one replica) or
// `postgres://user@host:5432/db` (several replicas sharing sessions through leases).
import { parseStoreUrl, type StoreSchema } from "@loopguard/sql-store";
import { POSTGRES_SESSION_MIGRATIONS } from "../migrations/postgres/index.js";
import { SQLITE_SESSION_MIGRATIONS } from "../migrations/sqlite/index.js";
import { PostgresSessionStore, type PostgresSessionStoreOptions } from "./postgres-session-store.js";
import type { SessionStore } from "./session-store.js";
import { SESSIONS_MIGRATION_STORE } from "./sql-session-rows.js";
import { SqliteSessionStore, type SqliteSessionStoreOptions } from "./sqlite-session-store.js";

/** The session tables' migrations, for the schema commands (`node dist/main.js migrate`). */
export const SESSIONS_SCHEMA: StoreSchema = {
  store: SESSIONS_MIGRATION_STORE,
  sqlite: SQLITE_SESSION_MIGRATIONS,
  postgres: POSTGRES_SESSION_MIGRATIONS,
};

/** Options of either backend; each reads its own. */
export type SessionStoreOpenOptions = PostgresSessionStoreOptions & SqliteSessionStoreOptions;

export async function openSessionStore(url: string, options: SessionStoreOpenOptions = {}): Promise<SessionStore> {
  const location = parseStoreUrl(url, "ORCHESTRATOR_STORE");
  return location.kind === "sqlite"
    ? SqliteSessionStore.open(location.file, options)
    : PostgresSessionStore.open(location.url, options);
}
