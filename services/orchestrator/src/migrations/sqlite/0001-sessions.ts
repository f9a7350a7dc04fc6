// The session tables on SQLite. A database made before versioned migrations is adopted: its
// layout (PRAGMA user_version 0 to 3) is brought to this one, one layout at a time. Runs inside
// the migrator's transaction, with foreign keys off (SQLite switches them only outside a
// transaction; the store turns them on after migrating) and checked before the commit.
import type { SqliteMigration } from "@loopguard/sql-store";
import type Database from "better-sqlite3";
import { SESSION_STATES, STOP_REASONS, TERMINAL_STATES } from "../../session/session-state.js";

/** A live session, as SQLite's partial indexes spell it; queries repeat it verbatim to use them. */
export const OPEN_SQL = "stop_reason IS NULL";

/**
 * `(column = 'a' OR column = 'b' …)` for known identifiers (never user input): cheaper than
 * `IN (list)` in a CHECK (docs/performance.md, "CHECK constraints in SQLite").
 */
const oneOf = (column: string, values: readonly string[]): string =>
  `(${values.map((v) => `${column} = '${v}'`).join(" OR ")})`;

/** The sessions table; a function of its name so that a layout change can rebuild it beside the old one. */
export const sessionsTable = (name: string): string => `CREATE TABLE IF NOT EXISTS ${name} (
  id TEXT PRIMARY KEY,
  state TEXT NOT NULL CHECK ${oneOf("state", SESSION_STATES)},
  version INTEGER NOT NULL CHECK (version >= 0),
  goal TEXT NOT NULL,
  task TEXT NOT NULL,
  budget TEXT NOT NULL,
  usage TEXT NOT NULL,
  context TEXT NOT NULL,
  pending TEXT,
  scopes TEXT NOT NULL,
  policy TEXT NOT NULL,
  stop_reason TEXT CHECK (stop_reason IS NULL OR ${oneOf("stop_reason", STOP_REASONS)}),
  answer TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  lease_owner TEXT,
  lease_expires_at INTEGER,
  idempotency_key TEXT,
  history_len INTEGER,
  created_by TEXT NOT NULL DEFAULT '',
  request_hash TEXT,
  UNIQUE (created_by, idempotency_key),
  CHECK (${oneOf("state", TERMINAL_STATES)} = (stop_reason IS NOT NULL))
);`;

/**
 * Step records, a kilobyte or two each, in a rowid table: appended in commit order, only the
 * small (session_id, step) key lands in the middle of an index.
 */
const stepsTable = (name: string): string => `CREATE TABLE IF NOT EXISTS ${name} (
  session_id TEXT NOT NULL REFERENCES sessions (id),
  step INTEGER NOT NULL CHECK (step >= 1),
  at INTEGER NOT NULL,
  payload TEXT NOT NULL,
  PRIMARY KEY (session_id, step)
);`;

/** The columns layouts 1 and 2 had, which a rebuild copies (later columns take their defaults). */
const LAYOUT2_COLUMN_NAMES = `id, state, version, goal, task, budget, usage, context, pending, scopes, policy, stop_reason,
  answer, created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, history_len`;

/** The last user_version before migrations; still written, so an older build does not convert the file again. */
const LAYOUT = 3;

// The guards repeat in SQL what assertTransition checks in code, so that no code path (an old
// binary, a hand-written UPDATE) can persist a transition outside TRANSITIONS.
export const SCHEMA = `
CREATE TABLE IF NOT EXISTS session_transitions (
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  PRIMARY KEY (from_state, to_state)
) WITHOUT ROWID;

${sessionsTable("sessions")}
CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at, id);
-- Live sessions are keyed on stop_reason, set once, when a session ends: a move between live
-- states changes no indexed column, so it rewrites the session's row and nothing else.
CREATE INDEX IF NOT EXISTS sessions_open ON sessions (created_at, id) WHERE ${OPEN_SQL};
CREATE INDEX IF NOT EXISTS sessions_ended ON sessions (state, created_at, id) WHERE stop_reason IS NOT NULL;

CREATE TABLE IF NOT EXISTS session_audit (
  session_id TEXT NOT NULL REFERENCES sessions (id),
  version INTEGER NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  at INTEGER NOT NULL,
  reason TEXT,
  tool TEXT,
  args_hash TEXT,
  expected_timeout_ms INTEGER,
  outcome TEXT,
  owner TEXT,
  PRIMARY KEY (session_id, version)
) WITHOUT ROWID;

-- context.history, one row per item: a step appends its items instead of rewriting a context
-- that grows with every step. sessions.history_len is NULL when the context has no history.
CREATE TABLE IF NOT EXISTS session_history (
  session_id TEXT NOT NULL REFERENCES sessions (id),
  seq INTEGER NOT NULL CHECK (seq >= 0),
  item TEXT NOT NULL,
  PRIMARY KEY (session_id, seq)
);

${stepsTable("session_steps")}

CREATE TRIGGER IF NOT EXISTS sessions_start_idle BEFORE INSERT ON sessions
WHEN NEW.state IS NOT 'IDLE' OR NEW.version IS NOT 0 OR NEW.stop_reason IS NOT NULL
BEGIN
  SELECT RAISE(ABORT, 'illegal session transition: a session starts IDLE at version 0');
END;

CREATE TRIGGER IF NOT EXISTS sessions_transition_guard BEFORE UPDATE OF state, version ON sessions
WHEN NEW.state IS NOT OLD.state OR NEW.version IS NOT OLD.version
BEGIN
  SELECT RAISE(ABORT, 'illegal session transition')
  WHERE NEW.version IS NOT OLD.version + 1
     OR NOT EXISTS (SELECT 1 FROM session_transitions WHERE from_state = OLD.state AND to_state = NEW.state);
END;

CREATE TRIGGER IF NOT EXISTS session_audit_guard BEFORE INSERT ON session_audit
BEGIN
  SELECT RAISE(ABORT, 'illegal session transition: audit row does not match the session')
  WHERE NOT EXISTS (SELECT 1 FROM sessions WHERE id = NEW.session_id AND version = NEW.version AND state = NEW.to_state)
     OR NOT EXISTS (SELECT 1 FROM session_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state);
END;
`;

/** Layout 0 kept context.history inside sessions.context: it moves into session_history rows. */
function historyToRows(db: Database.Database): void {
  const columns = db.prepare<[], string>(`SELECT name FROM pragma_table_info('sessions')`).pluck().all();
  if (!columns.includes("history_len")) db.exec(`ALTER TABLE sessions ADD COLUMN history_len INTEGER`);
  db.exec(`
    INSERT INTO session_history (session_id, seq, item)
      SELECT s.id, j.key, CASE WHEN j.type IN ('object', 'array') THEN j.value ELSE json_quote(j.value) END
      FROM sessions s, json_each(s.context, '$.history') j
      WHERE json_type(s.context, '$.history') = 'array';
    UPDATE sessions SET history_len = json_array_length(context, '$.history'), context = json_remove(context, '$.history')
      WHERE json_type(context, '$.history') = 'array';`);
}

/**
 * Layouts before 3 rebuild the sessions table (SQLite's procedure for changing a table's
 * constraints: a new table, the rows copied, the old one dropped); the triggers that name it go
 * first and come back with SCHEMA. Layout 2 spelled CHECKs without IN lists and made
 * session_steps a rowid table; layout 3 added the creator and the request hash and scoped
 * idempotency keys by creator (rows from before have creator '').
 */
function rebuild(db: Database.Database, layout: number): void {
  db.exec(`
    DROP TRIGGER IF EXISTS sessions_start_idle;
    DROP TRIGGER IF EXISTS sessions_transition_guard;
    DROP TRIGGER IF EXISTS session_audit_guard;
    ${sessionsTable("sessions_rebuilt")}
    INSERT INTO sessions_rebuilt (${LAYOUT2_COLUMN_NAMES}) SELECT ${LAYOUT2_COLUMN_NAMES} FROM sessions;
    DROP TABLE sessions;
    ALTER TABLE sessions_rebuilt RENAME TO sessions;`);
  if (layout < 2) {
    db.exec(`
      ${stepsTable("session_steps_rebuilt")}
      INSERT INTO session_steps_rebuilt (session_id, step, at, payload) SELECT session_id, step, at, payload FROM session_steps;
      DROP TABLE session_steps;
      ALTER TABLE session_steps_rebuilt RENAME TO session_steps;`);
  }
}

export const sessions: SqliteMigration = {
  name: "0001-sessions",
  compatibility: "expand",
  up(db) {
    const existed =
      db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'`).get() !== undefined;
    const layout = Number(db.pragma("user_version", { simple: true }));
    if (existed && layout < LAYOUT) {
      db.exec(SCHEMA);
      if (layout < 1) historyToRows(db);
      rebuild(db, layout);
    }
    db.exec(`${SCHEMA}
      PRAGMA user_version = ${LAYOUT};`);
    const broken = db.pragma("foreign_key_check") as unknown[];
    if (broken.length > 0) throw new Error(`sessions: ${broken.length} rows would lose their session`);
  },
};
