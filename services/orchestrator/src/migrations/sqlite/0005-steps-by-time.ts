// Step rows by the time they were written, so that retention (step-retention.ts) finds the oldest
// without reading the whole table.
import type { SqliteMigration } from "@loopguard/sql-store";

export const stepsByTime: SqliteMigration = {
  name: "0005-steps-by-time",
  // An index only: earlier builds read and write the table as before.
  compatibility: "expand",
  up(db) {
    db.exec(`CREATE INDEX IF NOT EXISTS session_steps_by_at ON session_steps (at);`);
  },
};
