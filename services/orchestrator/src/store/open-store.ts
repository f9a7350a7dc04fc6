// Picks the SessionStore implementation from one URL, so deployment config names a store the
// same way whichever backend it is: `sqlite:/var/lib/loopguard/sessions.db` (one replica) or
// `postgres://user@host:5432/db` (several replicas sharing sessions through leases).
import { join } from "node:path";
import { parseStoreUrl, type StoreSchema } from "@loopguard/sql-store";
import { type SecretSetting, secretSetting } from "@loopguard/tool-sdk";
import { POSTGRES_SESSION_MIGRATIONS } from "../migrations/postgres/index.js";
import { SQLITE_SESSION_MIGRATIONS } from "../migrations/sqlite/index.js";
import { DatabaseClock } from "./postgres-clock.js";
import type { PostgresSessionStoreOptions } from "./postgres-store-options.js";
import type { SessionStore } from "./session-store.js";
import { SlewingClock } from "./slewing-clock.js";
import { SESSIONS_MIGRATION_STORE } from "./sql-session-rows.js";
import { SqliteSessionStore, type SqliteSessionStoreOptions } from "./sqlite-session-store.js";

/** The session tables' migrations, for the schema commands (`node dist/main.js migrate`). */
export const SESSIONS_SCHEMA: StoreSchema = {
  store: SESSIONS_MIGRATION_STORE,
  sqlite: SQLITE_SESSION_MIGRATIONS,
  postgres: POSTGRES_SESSION_MIGRATIONS,
};

/**
 * The session store's URL: ORCHESTRATOR_STORE, or the file ORCHESTRATOR_STORE_FILE names (a mounted
 * Secret, so a DSN's password stays out of the environment), else the SQLite file under `dataDir`.
 */
export function storeSetting(env: Readonly<Record<string, string | undefined>>, dataDir: string): SecretSetting {
  return (
    secretSetting(env, "ORCHESTRATOR_STORE") ?? {
      value: `sqlite:${join(dataDir, "orchestrator.db")}`,
      variable: "ORCHESTRATOR_STORE",
    }
  );
}

/** Options of either backend; each reads its own. */
export type SessionStoreOpenOptions = PostgresSessionStoreOptions & SqliteSessionStoreOptions;

export async function openSessionStore(url: string, options: SessionStoreOpenOptions = {}): Promise<SessionStore> {
  const location = parseStoreUrl(url, "ORCHESTRATOR_STORE");
  if (location.kind === "sqlite") return SqliteSessionStore.open(location.file, options);
  // Imported only for a PostgreSQL store, as its driver is (sql-store's postgres.ts): a SQLite process never loads them.
  const { PostgresSessionStore } = await import("./postgres-session-store.js");
  return PostgresSessionStore.open(location.url, options);
}

/** What the store's clock tells, to be logged: a replica's offset from the database's clock, a step of SQLite's. */
export interface StoreClockNotices {
  /** PostgreSQL: the offset (database minus local, ms) when it is large (see postgres-clock.ts). */
  readonly onSkew?: (offsetMs: number) => void;
  /** SQLite: a step of the wall clock (ms), and whether it is slewed or followed at once (see slewing-clock.ts). */
  readonly onStep?: (stepMs: number, slewed: boolean) => void;
}

/**
 * The clock of the times replicas on the store share (approval expiries, session starts, wake times): on PostgreSQL
 * the database's, as `base` plus an offset the store keeps measuring; SQLite's one process reads `base` slewed, so a
 * step of it runs out no lease or deadline at once. `options` go to openSessionStore.
 */
export function storeClock(
  url: string,
  base: () => number = Date.now,
  notices: StoreClockNotices = {},
): { readonly now: () => number; readonly options: SessionStoreOpenOptions } {
  if (parseStoreUrl(url, "ORCHESTRATOR_STORE").kind !== "postgres") {
    const { now } = new SlewingClock(base, notices.onStep);
    return { now, options: { now } };
  }
  const clock = new DatabaseClock(base, notices.onSkew);
  return { now: clock.now, options: { clock } };
}
