// Patrol runs (`pnpm patrol`): one row per run of the golden set, its figures as the contract's
// PatrolRun in JSON, found newest first by when it finished.
import type { PostgresMigration } from "@loopguard/sql-store";

export const patrolRuns: PostgresMigration = {
  name: "0007-patrol-runs",
  // A new table only: earlier builds never read it.
  compatibility: "expand",
  async up(db) {
    await db.query(`
      CREATE TABLE patrol_runs (
        run_id      text PRIMARY KEY,
        finished_at bigint NOT NULL,
        run         jsonb NOT NULL
      );
      CREATE INDEX patrol_runs_by_finish ON patrol_runs (finished_at DESC, run_id DESC);`);
  },
};
