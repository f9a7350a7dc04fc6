// Picks the SessionStore implementation from one URL, so deployment config names a store the
// same way whichever backend it is: `sqlite:/var/lib/loopguard/sessions.db` (one replica) or
// `postgres://user@host:5432/db` (several replicas sharing sessions through leases).
import { PostgresSessionStore, type PostgresSessionStoreOptions } from "./postgres-session-store.js";
import type { SessionStore } from "./session-store.js";
import { SqliteSessionStore, type SqliteSessionStoreOptions } from "./sqlite-session-store.js";

/** Options of either backend; each reads its own. */
export type SessionStoreOpenOptions = PostgresSessionStoreOptions & SqliteSessionStoreOptions;

export async function openSessionStore(url: string, options: SessionStoreOpenOptions = {}): Promise<SessionStore> {
  if (url.startsWith("sqlite:")) {
    // `sqlite:/abs/path.db`, `sqlite:relative.db`, `sqlite:///abs/path.db` and `sqlite::memory:`.
    const file = url.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "");
    if (file === "") throw new RangeError(`session store URL has no file: ${url}`);
    return new SqliteSessionStore(file, options);
  }
  if (url.startsWith("postgres://") || url.startsWith("postgresql://")) {
    return PostgresSessionStore.open(url, options);
  }
  throw new RangeError(`unsupported session store URL (want sqlite:… or postgres://…): ${url.replace(/\/\/[^@/]*@/, "//***@")}`);
}
