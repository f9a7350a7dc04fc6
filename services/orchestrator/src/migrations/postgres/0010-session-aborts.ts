// The aborts replicas announce (a cancel made on one replica stopping the run on another), marked as well as
// NOTIFYed: a replica whose listening connection was being replaced when one was sent reads the marks it may have
// missed once listening again (store/postgres-notifications.ts). A mark is kept an hour, then pruned by the next abort.
import type { PostgresMigration } from "@loopguard/sql-store";

export const sessionAborts: PostgresMigration = {
  name: "0010-session-aborts",
  // A new table only: earlier builds neither read nor write it.
  compatibility: "expand",
  async up(db) {
    await db.query(
      `CREATE TABLE IF NOT EXISTS session_aborts (session_id text PRIMARY KEY, at bigint NOT NULL);
      CREATE INDEX IF NOT EXISTS session_aborts_by_time ON session_aborts (at);`,
    );
  },
};
