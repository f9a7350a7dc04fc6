// Step rows by the time they were written, so that retention (step-retention.ts) finds the oldest
// without reading the whole table.
import type { PostgresMigration } from "@loopguard/sql-store";

export const stepsByTime: PostgresMigration = {
  name: "0006-steps-by-time",
  // An index only: earlier builds read and write the table as before.
  compatibility: "expand",
  async up(db) {
    await db.query(`CREATE INDEX IF NOT EXISTS session_steps_by_at ON session_steps (at);`);
  },
};
