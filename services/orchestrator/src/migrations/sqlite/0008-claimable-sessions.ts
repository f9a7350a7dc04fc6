// Sessions a replica may have to drive (open, neither waiting on an approval nor parked), in
// creation order, so that the claim check (every second) reads those rather than every open
// session: sessions waiting on a human, however many, cost it nothing. The predicate repeats the
// claim's own terms, as SQLite uses a partial index only for a query that states them.
import type { SqliteMigration } from "@loopguard/sql-store";
import { OPEN_SQL } from "./0001-sessions.js";

export const claimableSessions: SqliteMigration = {
  name: "0008-claimable-sessions",
  // An index only: earlier builds read and write the table as before.
  compatibility: "expand",
  up(db) {
    db.exec(
      `CREATE INDEX IF NOT EXISTS sessions_claimable ON sessions (created_at, id) WHERE ${OPEN_SQL} AND state <> 'AWAITING_APPROVAL' AND state <> 'PARKED';`,
    );
  },
};
