// Picks the SessionStore implementation from one URL, so deployment config names a store the
// same way whichever backend it is: `sqlite:/var/lib/loopguard/sessions.db` (one replica) or
// `postgres://user@host:5432/db` (several replicas sharing sessions through leases).
import { parseStoreUrl } from "@loopguard/sql-store";
import { PostgresSessionStore, type PostgresSessionStoreOptions } from "./postgres-session-store.js";
import type { SessionStore } from "./session-store.js";
import { SqliteSessionStore, type SqliteSessionStoreOptions } from "./sqlite-session-store.js";

/** Options of either backend; each reads its own. */
export type SessionStoreOpenOptions = PostgresSessionStoreOptions & SqliteSessionStoreOptions;

export async function openSessionStore(url: string, options: SessionStoreOpenOptions = {}): Promise<SessionStore> {
  const location = parseStoreUrl(url, "ORCHESTRATOR_STORE");
  return location.kind === "sqlite" ? SqliteSessionStore.open(location.file, options) : PostgresSessionStore.open(location.url, options);
}
