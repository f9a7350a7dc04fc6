// Sessions that wait for a tool (PARKED, stop reason tool_unavailable): the state and stop-reason
// checks take the new values (a table made by an older 0001 lacks them), and parked sessions are
// found by their wake time.
import type { PostgresMigration } from "@loopguard/sql-store";
import { SESSION_STATES, STOP_REASONS } from "../../session/session-state.js";
import { sqlList } from "../../store/session-sql.js";

export const parkedSessions: PostgresMigration = {
  name: "0005-parked-sessions",
  // Widens the state and stop-reason checks only: a build without PARKED never writes the new values.
  compatibility: "expand",
  async up(db) {
    await db.query(`
      ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_state_check,
        ADD CONSTRAINT sessions_state_check CHECK (state IN (${sqlList(SESSION_STATES)}));
      ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_stop_reason_check,
        ADD CONSTRAINT sessions_stop_reason_check CHECK (stop_reason IS NULL OR stop_reason IN (${sqlList(STOP_REASONS)}));
      CREATE INDEX sessions_parked ON sessions (((pending->'park'->>'wakeAt')::bigint)) WHERE state = 'PARKED';`);
  },
};
