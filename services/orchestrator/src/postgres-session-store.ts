// SessionStore on PostgreSQL, for several orchestrator replicas sharing sessions through
// leases. Round trips dominate (docs/performance.md), so the hot paths are single statements: a transition is one UPDATE…RETURNING plus its audit INSERT in one
// data-modifying CTE (atomic as one statement), a claim is one UPDATE over a
// FOR UPDATE SKIP LOCKED subquery. Named statements are parsed once per connection.
// Leases are measured by the database's clock, never a replica's. Every committed change is
// announced by a trigger's NOTIFY, which every store instance (every replica) LISTENs to.
import { inTransaction, isPostgresUnavailable, postgresClientConfig } from "@loopguard/sql-store";
import pg from "pg";
import {
  IllegalTransitionError,
  SESSION_STATES,
  STOP_REASONS,
  TRANSITION_PAIRS,
  type SessionState,
  type StopReason,
} from "./session-state.js";
import {
  checkLimit,
  checkTtl,
  byCreated,
  decodeCursor,
  DuplicateStepError,
  emptyCounts,
  encodeCursor,
  initialUsage,
  LeaseLostError,
  movesOf,
  releasesLease,
  SessionExistsError,
  SessionListeners,
  SessionNotFoundError,
  StaleTransitionError,
  StoreUnavailableError,
  type AuditRecord,
  type BudgetLimits,
  type JsonObject,
  type ListQuery,
  type NewSession,
  type SessionListener,
  type SessionPage,
  type SessionRecord,
  type SessionStore,
  type SessionStoreOptions,
  type StepRecord,
  type TransitionInput,
  type Usage,
} from "./session-store.js";
import { LIVE_SQL, sqlList, TERMINAL_SQL } from "./session-sql.js";
import { SessionNotifications, SESSIONS_CHANNEL } from "./postgres-notifications.js";

/** SQLSTATE raised by the guard triggers. */
const ILLEGAL_TRANSITION_SQLSTATE = "LGT01";
/** Serialises schema setup when several replicas start at once (CREATE … IF NOT EXISTS races otherwise). */
const SCHEMA_LOCK_KEY = 0x4c47_5353;
/** The database's time in epoch milliseconds: the one clock every replica's leases are measured by. */
const DB_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

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

const COLUMNS = `id, state, version, goal, task, budget, usage, context, pending, scopes, policy, stop_reason, answer,
  created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, created_by, request_hash`;

interface SessionRow {
  id: string;
  state: SessionState;
  version: number;
  goal: string;
  task: JsonObject;
  budget: BudgetLimits;
  usage: Usage;
  context: JsonObject;
  pending: JsonObject | null;
  scopes: string[];
  policy: string;
  stop_reason: StopReason | null;
  answer: string | null;
  // bigint columns arrive as strings: pg does not narrow int8 to a JS number by itself.
  created_at: string;
  updated_at: string;
  lease_owner: string | null;
  lease_expires_at: string | null;
  idempotency_key: string | null;
  created_by: string;
  request_hash: string | null;
}

interface AuditRow {
  session_id: string;
  version: number;
  from_state: SessionState;
  to_state: SessionState;
  at: string;
  reason: string | null;
  tool: string | null;
  args_hash: string | null;
  expected_timeout_ms: string | null;
  outcome: string | null;
  owner: string | null;
}

const num = (v: string | null): number | null => (v === null ? null : Number(v));

function toRecord(r: SessionRow): SessionRecord {
  return {
    id: r.id,
    state: r.state,
    version: r.version,
    goal: r.goal,
    task: r.task,
    budget: r.budget,
    usage: r.usage,
    context: r.context,
    pending: r.pending,
    scopes: r.scopes,
    policy: r.policy,
    stopReason: r.stop_reason,
    answer: r.answer,
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
    leaseOwner: r.lease_owner,
    leaseExpiresAt: num(r.lease_expires_at),
    idempotencyKey: r.idempotency_key,
    createdBy: r.created_by,
    requestHash: r.request_hash,
  };
}

function toAudit(r: AuditRow): AuditRecord {
  return {
    sessionId: r.session_id,
    version: r.version,
    from: r.from_state,
    to: r.to_state,
    at: Number(r.at),
    reason: r.reason,
    tool: r.tool,
    argsHash: r.args_hash,
    expectedTimeoutMs: num(r.expected_timeout_ms),
    outcome: r.outcome,
    owner: r.owner,
  };
}

function pgCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err && typeof err.code === "string" ? err.code : undefined;
}

const Q = {
  insert: `INSERT INTO sessions (${COLUMNS})
    VALUES ($1, 'IDLE', 0, $2, $3::jsonb, $4::jsonb, $5::jsonb, '{}'::jsonb, NULL, $6::jsonb, $7, NULL, NULL, $8, $8, $10,
      CASE WHEN $11::bigint IS NULL THEN NULL ELSE ${DB_NOW_MS} + $11::bigint END, $9, $12, $13)
    ON CONFLICT (created_by, idempotency_key) DO NOTHING
    RETURNING ${COLUMNS}`,
  byId: `SELECT ${COLUMNS} FROM sessions WHERE id = $1`,
  byKey: `SELECT ${COLUMNS} FROM sessions WHERE created_by = $1 AND idempotency_key = $2`,
  transition: `WITH moved AS (
      UPDATE sessions SET
        state = $3,
        version = version + 1,
        usage = CASE WHEN $5::jsonb IS NULL THEN usage ELSE $5::jsonb END,
        context = CASE WHEN $6::jsonb IS NULL THEN context ELSE $6::jsonb END,
        pending = CASE WHEN $7::boolean THEN $8::jsonb ELSE pending END,
        answer = CASE WHEN $9::boolean THEN $10::text ELSE answer END,
        stop_reason = $11::text,
        updated_at = $12,
        lease_owner = CASE WHEN $13::boolean THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN $13::boolean THEN NULL ELSE lease_expires_at END
      WHERE id = $1 AND state = $2 AND version = $4
        AND ($14::text IS NULL OR (lease_owner = $14::text AND lease_expires_at > ${DB_NOW_MS}))
      RETURNING ${COLUMNS}
    ), audited AS (
      INSERT INTO session_audit (session_id, version, from_state, to_state, at, reason, tool, args_hash,
        expected_timeout_ms, outcome, owner)
      SELECT id, version, $2, $3, $12, $15, $16, $17, $18, $19, $14 FROM moved
    ), stepped AS (
      INSERT INTO session_steps (session_id, step, at, payload)
      SELECT id, $20::int, $21, $22::jsonb FROM moved WHERE $20::int IS NOT NULL
    )
    SELECT * FROM moved`,
  auditTrail: `SELECT * FROM session_audit WHERE session_id = $1 AND version > $2 ORDER BY version`,
  steps: `SELECT step, at, payload FROM session_steps WHERE session_id = $1 AND step > $2 ORDER BY step`,
  countByState: `SELECT state, count(*) AS n FROM sessions GROUP BY state`,
  claim: `UPDATE sessions SET lease_owner = $1, lease_expires_at = ${DB_NOW_MS} + $2::bigint
    WHERE id IN (
      SELECT id FROM sessions
      WHERE ${LIVE_SQL} AND state <> 'AWAITING_APPROVAL' AND (lease_owner IS NULL OR lease_expires_at <= ${DB_NOW_MS})
      ORDER BY created_at, id LIMIT $3
      FOR UPDATE SKIP LOCKED)
    RETURNING ${COLUMNS}`,
  renew: `UPDATE sessions SET lease_expires_at = ${DB_NOW_MS} + $3::bigint
    WHERE id = $1 AND lease_owner = $2 AND lease_expires_at > ${DB_NOW_MS} AND ${LIVE_SQL}`,
  release: `UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1 AND lease_owner = $2`,
  expiredApprovals: `SELECT ${COLUMNS} FROM sessions
    WHERE state = 'AWAITING_APPROVAL' AND (pending->'approval'->>'expiresAt')::numeric <= $1
    ORDER BY created_at, id LIMIT $2`,
} as const;

const page = (where: string): string =>
  `SELECT ${COLUMNS} FROM sessions ${where} ORDER BY created_at, id LIMIT $1`;
const LIST = {
  all: page(""),
  allAfter: page(`WHERE (created_at, id) > ($2, $3)`),
  state: page(`WHERE state = $2`),
  stateAfter: page(`WHERE state = $2 AND (created_at, id) > ($3, $4)`),
} as const;

export interface PostgresSessionStoreOptions extends SessionStoreOptions {
  /** Pool size; each replica needs few, since the hot paths are one statement each. */
  readonly maxConnections?: number;
  /** Waiting for a connection, new or from the pool (default 1000). */
  readonly connectTimeoutMs?: number;
  /**
   * The server's statement_timeout and lock_timeout (default 1000); the client gives up on a
   * reply 1 s after it, for a network that stops answering. `?statement_timeout=…` and
   * `?lock_timeout=…` in the store URL win.
   */
  readonly statementTimeoutMs?: number;
  /** How often the listening connection is checked; a dead one is replaced (default 5000). */
  readonly listenCheckMs?: number;
}

export const POSTGRES_STORE_DEFAULTS = { connectTimeoutMs: 1000, statementTimeoutMs: 1000, listenCheckMs: 5000 } as const;

/** Connection settings: every wait bounded, so an outage surfaces as an error inside the API's deadlines. */
function connectionConfig(url: string, options: PostgresSessionStoreOptions): pg.ClientConfig {
  const statementTimeoutMs = options.statementTimeoutMs ?? POSTGRES_STORE_DEFAULTS.statementTimeoutMs;
  return postgresClientConfig(url, {
    connectTimeoutMs: options.connectTimeoutMs ?? POSTGRES_STORE_DEFAULTS.connectTimeoutMs,
    statementTimeoutMs,
    lockTimeoutMs: statementTimeoutMs,
    applicationName: "loopguard-orchestrator",
  });
}

/** Schema setup may wait for another replica's and runs DDL: its own, generous bound. */
const SCHEMA_TIMEOUT_MS = 300_000;

export class PostgresSessionStore implements SessionStore {
  private readonly now: () => number;
  private readonly onUnavailable: ((error: StoreUnavailableError) => void) | undefined;
  private readonly listeners = new SessionListeners();
  private notifications: SessionNotifications | undefined;
  private closed = false;

  private constructor(
    private readonly pool: pg.Pool,
    options: SessionStoreOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.onUnavailable = options.onUnavailable;
  }

  /** Connects, creates (or upgrades) the schema and starts listening; the database itself must exist. */
  static async open(url: string, options: PostgresSessionStoreOptions = {}): Promise<PostgresSessionStore> {
    const config = connectionConfig(url, options);
    const pool = new pg.Pool({ ...config, max: options.maxConnections ?? 10 });
    // An idle client losing its connection emits 'error' on the pool, which would otherwise
    // crash the process; the pool drops that client and the next query reports any outage.
    pool.on("error", () => {});
    const store = new PostgresSessionStore(pool, options);
    try {
      await store.inTransaction("open", async (c) => {
        // pg honours a per-query query_timeout, which its types leave out.
        const bounded = (text: string, values: unknown[] = []) => c.query({ text, values, query_timeout: SCHEMA_TIMEOUT_MS } as pg.QueryConfig);
        await bounded(`SET LOCAL statement_timeout = ${SCHEMA_TIMEOUT_MS}`);
        await bounded(`SET LOCAL lock_timeout = ${SCHEMA_TIMEOUT_MS}`);
        await bounded(`SELECT pg_advisory_xact_lock($1)`, [SCHEMA_LOCK_KEY]);
        await bounded(SCHEMA);
        await bounded(`DELETE FROM session_transitions`);
        await bounded(`INSERT INTO session_transitions (from_state, to_state) SELECT * FROM unnest($1::text[], $2::text[])`, [
          TRANSITION_PAIRS.map(([f]) => f),
          TRANSITION_PAIRS.map(([, t]) => t),
        ]);
      });
      store.notifications = await SessionNotifications.start(
        { ...config, application_name: "loopguard-orchestrator-listen" },
        store.listeners,
        options.listenCheckMs ?? POSTGRES_STORE_DEFAULTS.listenCheckMs,
      );
    } catch (err) {
      await pool.end();
      throw err;
    }
    return store;
  }

  private async inTransaction<T>(operation: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    try {
      return await inTransaction(this.pool, fn);
    } catch (err) {
      throw this.unavailableOr(operation, err);
    }
  }

  private async query<R extends pg.QueryResultRow>(operation: string, name: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
    try {
      return await this.pool.query<R>({ name, text, values });
    } catch (err) {
      throw this.unavailableOr(operation, err);
    }
  }

  private async rows<R extends pg.QueryResultRow>(operation: string, name: string, text: string, values: unknown[]): Promise<R[]> {
    return (await this.query<R>(operation, name, text, values)).rows;
  }

  private unavailableOr(operation: string, error: unknown): unknown {
    if (error instanceof StoreUnavailableError || !isPostgresUnavailable(error)) return error;
    const unavailable = new StoreUnavailableError(operation, error);
    this.onUnavailable?.(unavailable);
    return unavailable;
  }

  async create(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    const now = this.now();
    let rows: SessionRow[];
    try {
      rows = await this.rows<SessionRow>("create", "lg_session_insert", Q.insert, [
        input.id,
        input.goal,
        JSON.stringify(input.task),
        JSON.stringify(input.budget),
        JSON.stringify(initialUsage(now)),
        JSON.stringify(input.scopes),
        input.policy,
        now,
        input.idempotencyKey ?? null,
        input.lease?.owner ?? null,
        input.lease?.ttlMs ?? null,
        input.createdBy,
        input.requestHash ?? null,
      ]);
    } catch (err) {
      if (pgCode(err) === "23505") throw new SessionExistsError(input.id);
      throw err;
    }
    const row = rows[0];
    if (row) return { session: toRecord(row), created: true };
    const existing = (await this.rows<SessionRow>("create", "lg_session_by_key", Q.byKey, [input.createdBy, input.idempotencyKey]))[0];
    if (existing) return { session: toRecord(existing), created: false };
    throw new SessionExistsError(input.id);
  }

  async get(id: string): Promise<SessionRecord | null> {
    const row = (await this.rows<SessionRow>("get", "lg_session_by_id", Q.byId, [id]))[0];
    return row ? toRecord(row) : null;
  }

  async list(query: ListQuery): Promise<SessionPage> {
    checkLimit(query.limit);
    const after = query.after === undefined ? undefined : decodeCursor(query.after);
    const cursor = after ? [after.createdAt, after.id] : [];
    const [name, text, values] =
      query.state === undefined
        ? after
          ? (["lg_list_all_after", LIST.allAfter, [query.limit + 1, ...cursor]] as const)
          : (["lg_list_all", LIST.all, [query.limit + 1]] as const)
        : after
          ? (["lg_list_state_after", LIST.stateAfter, [query.limit + 1, query.state, ...cursor]] as const)
          : (["lg_list_state", LIST.state, [query.limit + 1, query.state]] as const);
    const rows = await this.rows<SessionRow>("list", name, text, [...values]);
    const sessions = rows.slice(0, query.limit).map(toRecord);
    const last = sessions.at(-1);
    return { sessions, nextCursor: rows.length > query.limit && last ? encodeCursor(last) : null };
  }

  async countByState(): Promise<Record<SessionState, number>> {
    const counts = emptyCounts();
    const rows = await this.rows<{ state: SessionState; n: string }>("countByState", "lg_count_by_state", Q.countByState, []);
    for (const { state, n } of rows) counts[state] = Number(n);
    return counts;
  }

  async transition(t: TransitionInput): Promise<SessionRecord> {
    const moves = movesOf(t);
    const patch = t.patch ?? {};
    // Each move is one statement (UPDATE … RETURNING plus its audit INSERT); moves through `via`
    // share a transaction, a lone move needs none.
    const run = async (query: (name: string, text: string, values: unknown[]) => Promise<SessionRow[]>): Promise<SessionRow | undefined> => {
      let row: SessionRow | undefined;
      for (const [i, move] of moves.entries()) {
        const last = i === moves.length - 1;
        row = (
          await query("lg_transition", Q.transition, [
            t.id,
            move.from,
            move.to,
            move.version - 1,
            !last || patch.usage === undefined ? null : JSON.stringify(patch.usage),
            !last || patch.context === undefined ? null : JSON.stringify(patch.context),
            last && patch.pending !== undefined,
            !last || patch.pending == null ? null : JSON.stringify(patch.pending),
            last && patch.answer !== undefined,
            last ? (patch.answer ?? null) : null,
            last ? (patch.stopReason ?? null) : null,
            move.audit.at,
            releasesLease(move.to),
            t.owner ?? null,
            move.audit.reason ?? null,
            move.audit.tool ?? null,
            move.audit.argsHash ?? null,
            move.audit.expectedTimeoutMs ?? null,
            move.audit.outcome ?? null,
            last ? (t.step?.step ?? null) : null,
            last ? (t.step?.at ?? null) : null,
            last && t.step ? (t.step.json ?? JSON.stringify(t.step.payload)) : null,
          ])
        )[0];
        if (!row) throw await this.whyNotApplied(t);
      }
      return row;
    };
    let row: SessionRow | undefined;
    try {
      row =
        moves.length === 1
          ? await run((name, text, values) => this.rows<SessionRow>("transition", name, text, values))
          : await this.inTransaction("transition", (c) => run(async (name, text, values) => (await c.query<SessionRow>({ name, text, values })).rows));
    } catch (err) {
      // Only reached if code and database disagree about TRANSITIONS (e.g. an older binary's table).
      const code = pgCode(err);
      if (code === ILLEGAL_TRANSITION_SQLSTATE || code === "23514") {
        throw new IllegalTransitionError(t.from, t.to, `refused by the database: ${(err as Error).message}`);
      }
      if (code === "23505" && t.step) throw new DuplicateStepError(t.id, t.step.step);
      throw err;
    }
    return toRecord(row!);
  }

  private async whyNotApplied(t: TransitionInput): Promise<Error> {
    const row = (await this.rows<SessionRow>("transition", "lg_session_by_id", Q.byId, [t.id]))[0];
    if (!row) return new SessionNotFoundError(t.id);
    const actual = { state: row.state, version: row.version };
    if (row.state !== t.from || row.version !== t.expectedVersion) {
      return new StaleTransitionError(t.id, { state: t.from, version: t.expectedVersion }, actual);
    }
    return new LeaseLostError(t.id, actual, t.owner ?? "", row.lease_owner);
  }

  async steps(sessionId: string, afterStep = 0): Promise<StepRecord[]> {
    const rows = await this.rows<{ step: number; at: string; payload: JsonObject }>("steps", "lg_steps", Q.steps, [sessionId, afterStep]);
    return rows.map((r) => ({ step: r.step, at: Number(r.at), payload: r.payload }));
  }

  async auditTrail(sessionId: string, afterVersion = 0): Promise<AuditRecord[]> {
    return (await this.rows<AuditRow>("auditTrail", "lg_audit_trail", Q.auditTrail, [sessionId, afterVersion])).map(toAudit);
  }

  async claim(owner: string, ttlMs: number, limit: number): Promise<SessionRecord[]> {
    if (owner === "") throw new RangeError("owner must not be empty");
    checkTtl(ttlMs);
    checkLimit(limit);
    const rows = await this.rows<SessionRow>("claim", "lg_claim", Q.claim, [owner, ttlMs, limit]);
    return rows.map(toRecord).sort(byCreated);
  }

  async renewLease(id: string, owner: string, ttlMs: number): Promise<boolean> {
    checkTtl(ttlMs);
    return (await this.query("renewLease", "lg_renew", Q.renew, [id, owner, ttlMs])).rowCount === 1;
  }

  async releaseLease(id: string, owner: string): Promise<boolean> {
    return (await this.query("releaseLease", "lg_release", Q.release, [id, owner])).rowCount === 1;
  }

  async expiredApprovals(now: number, limit: number): Promise<SessionRecord[]> {
    checkLimit(limit);
    return (await this.rows<SessionRow>("expiredApprovals", "lg_expired_approvals", Q.expiredApprovals, [now, limit])).map(toRecord);
  }

  subscribe(listener: SessionListener): () => void {
    return this.listeners.add(listener);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.notifications?.close();
    await this.pool.end();
  }
}
