// The session tables on PostgreSQL. Every statement is idempotent, so a database made before
// versioned migrations (no version recorded) is adopted as it is, including the oldest, whose
// idempotency keys were not yet scoped by creator.
import type { PostgresMigration } from "@loopguard/sql-store";
import { SESSIONS_CHANNEL } from "../../store/postgres-notifications.js";
import { SESSION_STATES, STOP_REASONS } from "../../session/session-state.js";
import { LIVE_SQL, sqlList, TERMINAL_SQL } from "../../store/session-sql.js";

/** SQLSTATE raised by the guard triggers. */
export const ILLEGAL_TRANSITION_SQLSTATE = "LGT01";

// The guards repeat in SQL what assertTransition checks in code, so that no code path (an old
// binary, a hand-written UPDATE) can persist a transition outside TRANSITIONS. The audit check
// is an AFTER trigger because it must see the UPDATE made by the same statement's CTE.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS session_transitions (
  from_state text NOT NULL,
  to_state text NOT NULL,
  PRIMARY KEY (from_state, to_state)
);

CREATE TABLE IF NOT EXISTS sessions (
  id text PRIMARY KEY,
  state text NOT NULL CHECK (state IN (${sqlList(SESSION_STATES)})),
  version integer NOT NULL CHECK (version >= 0),
  goal text NOT NULL,
  task jsonb NOT NULL,
  budget jsonb NOT NULL,
  usage jsonb NOT NULL,
  context jsonb NOT NULL,
  pending jsonb,
  scopes jsonb NOT NULL,
  policy text NOT NULL,
  stop_reason text CHECK (stop_reason IS NULL OR stop_reason IN (${sqlList(STOP_REASONS)})),
  answer text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  lease_owner text,
  lease_expires_at bigint,
  idempotency_key text,
  created_by text NOT NULL DEFAULT '',
  request_hash text,
  CHECK ((state IN (${TERMINAL_SQL})) = (stop_reason IS NOT NULL))
);
-- Databases made before idempotency keys were scoped by creator: add the columns, move the key.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS created_by text NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS request_hash text;
ALTER TABLE sessions DROP CONSTRAINT IF EXISTS sessions_idempotency_key_key;
CREATE UNIQUE INDEX IF NOT EXISTS sessions_by_creator_key ON sessions (created_by, idempotency_key);
CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at, id);
CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state, created_at, id);
CREATE INDEX IF NOT EXISTS sessions_live ON sessions (created_at, id) WHERE ${LIVE_SQL};

CREATE TABLE IF NOT EXISTS session_audit (
  session_id text NOT NULL REFERENCES sessions (id),
  version integer NOT NULL,
  from_state text NOT NULL,
  to_state text NOT NULL,
  at bigint NOT NULL,
  reason text,
  tool text,
  args_hash text,
  expected_timeout_ms bigint,
  outcome text,
  owner text,
  PRIMARY KEY (session_id, version)
);

CREATE TABLE IF NOT EXISTS session_steps (
  session_id text NOT NULL REFERENCES sessions (id),
  step integer NOT NULL CHECK (step >= 1),
  at bigint NOT NULL,
  payload jsonb NOT NULL,
  PRIMARY KEY (session_id, step)
);

CREATE OR REPLACE FUNCTION loopguard_session_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.state <> 'IDLE' OR NEW.version <> 0 OR NEW.stop_reason IS NOT NULL THEN
      RAISE EXCEPTION 'illegal session transition: a session starts IDLE at version 0'
        USING ERRCODE = '${ILLEGAL_TRANSITION_SQLSTATE}';
    END IF;
  ELSIF NEW.state IS DISTINCT FROM OLD.state OR NEW.version IS DISTINCT FROM OLD.version THEN
    IF NEW.version IS DISTINCT FROM OLD.version + 1 OR NOT EXISTS (
      SELECT 1 FROM session_transitions WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
      RAISE EXCEPTION 'illegal session transition % -> % (version % -> %)', OLD.state, NEW.state, OLD.version, NEW.version
        USING ERRCODE = '${ILLEGAL_TRANSITION_SQLSTATE}';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER sessions_transition_guard BEFORE INSERT OR UPDATE ON sessions
  FOR EACH ROW EXECUTE FUNCTION loopguard_session_guard();

CREATE OR REPLACE FUNCTION loopguard_session_audit_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM sessions WHERE id = NEW.session_id AND version = NEW.version AND state = NEW.to_state)
     OR NOT EXISTS (SELECT 1 FROM session_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state) THEN
    RAISE EXCEPTION 'illegal session transition: audit row % -> % does not match the session', NEW.from_state, NEW.to_state
      USING ERRCODE = '${ILLEGAL_TRANSITION_SQLSTATE}';
  END IF;
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER session_audit_guard AFTER INSERT ON session_audit
  FOR EACH ROW EXECUTE FUNCTION loopguard_session_audit_guard();

-- Every replica hears of a session created, moved, or let go (claimable again); NOTIFY is
-- delivered after the commit, once per row change. Lease renewals and claims stay silent.
CREATE OR REPLACE FUNCTION loopguard_session_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('${SESSIONS_CHANNEL}', json_build_array(NEW.id, NEW.version, NEW.state, NEW.lease_owner)::text);
  RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER sessions_notify_insert AFTER INSERT ON sessions
  FOR EACH ROW EXECUTE FUNCTION loopguard_session_notify();
CREATE OR REPLACE TRIGGER sessions_notify_update AFTER UPDATE ON sessions
  FOR EACH ROW WHEN (NEW.version <> OLD.version OR (NEW.lease_owner IS NULL AND OLD.lease_owner IS NOT NULL))
  EXECUTE FUNCTION loopguard_session_notify();
`;

export const sessions: PostgresMigration = {
  name: "0001-sessions",
  compatibility: "expand",
  async up(db) {
    await db.query(SCHEMA);
  },
};
