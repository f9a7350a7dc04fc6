// Sessions that wait for a tool (PARKED, stop reason tool_unavailable). SQLite cannot change a
// table's CHECK constraints, so a sessions table made before them is rebuilt with every column it
// has (SQLite's procedure: a new table, the rows copied, the old one dropped, the new one renamed);
// its indexes and guard triggers come back with it. Parked sessions are found by their wake time.
import type { SqliteMigration } from "@loopguard/sql-store";
import { OPEN_SQL, SCHEMA, sessionsTable } from "./0001-sessions.js";

export const parkedSessions: SqliteMigration = {
  name: "0004-parked-sessions",
  // Rebuilds the sessions table with wider checks and every column it had: earlier builds read and write it as before.
  compatibility: "expand",
  up(db) {
    const table =
      db
        .prepare<[], string>(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'`)
        .pluck()
        .get() ?? "";
    if (!table.includes("'PARKED'")) {
      const columns = db.prepare<[], string>(`SELECT name FROM pragma_table_info('sessions')`).pluck().all().join(", ");
      db.exec(`
        DROP TRIGGER IF EXISTS sessions_start_idle;
        DROP TRIGGER IF EXISTS sessions_transition_guard;
        DROP TRIGGER IF EXISTS session_audit_guard;
        ${sessionsTable("sessions_rebuilt")}
        INSERT INTO sessions_rebuilt (${columns}) SELECT ${columns} FROM sessions;
        DROP TABLE sessions;
        ALTER TABLE sessions_rebuilt RENAME TO sessions;
        ${SCHEMA}
        CREATE INDEX sessions_by_creator ON sessions (created_by, created_at, id);
        CREATE INDEX sessions_by_creator_open ON sessions (created_by) WHERE ${OPEN_SQL};`);
    }
    db.exec(
      `CREATE INDEX sessions_parked ON sessions (json_extract(pending, '$.park.wakeAt')) WHERE state = 'PARKED';`,
    );
    const broken = db.pragma("foreign_key_check") as unknown[];
    if (broken.length > 0) throw new Error(`sessions: ${broken.length} rows would lose their session`);
  },
};
