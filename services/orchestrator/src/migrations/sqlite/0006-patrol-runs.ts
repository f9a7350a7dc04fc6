// Patrol runs (`pnpm patrol`): one row per run of the golden set, its figures as the contract's
// PatrolRun in JSON, found newest first by when it finished.
import type { SqliteMigration } from "@loopguard/sql-store";

export const patrolRuns: SqliteMigration = {
  name: "0006-patrol-runs",
  // A new table only: earlier builds never read it.
  compatibility: "expand",
  up(db) {
    db.exec(`
      CREATE TABLE patrol_runs (
        run_id      TEXT PRIMARY KEY,
        finished_at INTEGER NOT NULL,
        run         TEXT NOT NULL
      ) STRICT;
      CREATE INDEX patrol_runs_by_finish ON patrol_runs (finished_at DESC, run_id DESC);`);
  },
};
