// Sessions a replica may have to drive (live, neither waiting on an approval nor parked), in
// creation order, so that the claim check (every second) reads those rather than every live
// session: sessions waiting on a human, however many, cost it nothing.
import type { PostgresMigration } from "@loopguard/sql-store";
import { LIVE_SQL } from "../../store/session-sql.js";

export const claimableSessions: PostgresMigration = {
  name: "0009-claimable-sessions",
  // An index only: earlier builds read and write the table as before.
  compatibility: "expand",
  async up(db) {
    await db.query(
      `CREATE INDEX IF NOT EXISTS sessions_claimable ON sessions (created_at, id) WHERE ${LIVE_SQL} AND state <> 'AWAITING_APPROVAL' AND state <> 'PARKED';`,
    );
  },
};
