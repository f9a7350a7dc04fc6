// Indexes for who sees which session and for the per-caller quota: a creator's sessions in
// creation order (its lists, pages and counts), and its sessions in flight (the quota's count,
// read inside the create's transaction). A move between live states changes neither: created_by
// never changes, and the partial index is keyed on stop_reason, which is set once, at the end.
import type { SqliteMigration } from "@loopguard/sql-store";
import { OPEN_SQL } from "./0001-sessions.js";

export const sessionsByCreator: SqliteMigration = {
  name: "0002-sessions-by-creator",
  compatibility: "expand",
  up(db) {
    db.exec(`
      CREATE INDEX sessions_by_creator ON sessions (created_by, created_at, id);
      CREATE INDEX sessions_by_creator_open ON sessions (created_by) WHERE ${OPEN_SQL};`);
  },
};
