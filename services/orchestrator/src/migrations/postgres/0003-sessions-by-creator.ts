// Indexes for who sees which session and for the per-caller quota: a creator's sessions in
// creation order (its lists, pages and counts), and its live sessions (the quota's count, read
// inside the create's transaction under the creator's lock).
import type { PostgresMigration } from "@loopguard/sql-store";
import { LIVE_SQL } from "../../store/session-sql.js";

export const sessionsByCreator: PostgresMigration = {
  name: "0003-sessions-by-creator",
  compatibility: "expand",
  async up(db) {
    await db.query(`
      CREATE INDEX sessions_by_creator ON sessions (created_by, created_at, id);
      CREATE INDEX sessions_by_creator_live ON sessions (created_by) WHERE ${LIVE_SQL};`);
  },
};
