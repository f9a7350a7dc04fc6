// The options of the PostgreSQL session store (postgres-session-store.ts) and their defaults.
import type { PoolObserver, SchemaOptions } from "@loopguard/sql-store";
import type { DatabaseClock } from "./postgres-clock.js";
import type { SessionStoreOptions } from "./session-store.js";

export interface PostgresSessionStoreOptions extends SessionStoreOptions, SchemaOptions {
  /** Pool size; each replica needs few, since the hot paths are one statement each. */
  readonly maxConnections?: number;
  /** Waiting for a connection, new or from the pool (default 1000). */
  readonly connectTimeoutMs?: number;
  /**
   * The server's statement_timeout and lock_timeout (default 1000); the client gives up on a reply 1 s after it, for a
   * network that stops answering. `?statement_timeout=…` and `?lock_timeout=…` in the store URL win.
   */
  readonly statementTimeoutMs?: number;
  /** How often the listening connection is checked; a dead one is replaced (default 5000). */
  readonly listenCheckMs?: number;
  /** Told of the pool's round trips and waits (the orchestrator's metrics). */
  readonly poolObserver?: PoolObserver;
  /**
   * The replicas' shared clock, kept in step with the database's here (at open, then on each check of the listening
   * connection); the store reads its times from it in place of `now`. Without it, `now` is read as given.
   */
  readonly clock?: DatabaseClock;
}

export const POSTGRES_STORE_DEFAULTS = {
  connectTimeoutMs: 1000,
  statementTimeoutMs: 1000,
  listenCheckMs: 5000,
} as const;
