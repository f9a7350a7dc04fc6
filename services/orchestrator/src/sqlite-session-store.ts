// SessionStore on one SQLite file (better-sqlite3, WAL, synchronous=NORMAL: a committed
// transition survives a process crash). better-sqlite3 is synchronous, so each method runs its
// transaction to the end before any other caller in this process gets a turn; BEGIN IMMEDIATE
// and busy_timeout cover other processes sharing the file.
import { isSqliteUnavailable, openSqlite } from "@loopguard/sql-store";
import Database from "better-sqlite3";
import { itemJson } from "./history-json.js";
import {
  IllegalTransitionError,
  isTerminal,
  SESSION_STATES,
  STOP_REASONS,
  TERMINAL_STATES,
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
  type SessionEvent,
  type SessionListener,
  type ListQuery,
  type NewSession,
  type SessionPage,
  type SessionRecord,
  type SessionStore,
  type SessionStoreOptions,
  type StepRecord,
  type JsonObject,
  type JsonValue,
  type Move,
  type TransitionInput,
} from "./session-store.js";


/** A live session, as SQLite's partial indexes spell it; queries repeat it verbatim to use them. */
const OPEN_SQL = "stop_reason IS NULL";

/**
 * `(column = 'a' OR column = 'b' …)` for known identifiers (never user input): cheaper than
 * `IN (list)` in a CHECK (docs/performance.md, "CHECK constraints in SQLite").
 */
const oneOf = (column: string, values: readonly string[]): string => `(${values.map((v) => `${column} = '${v}'`).join(" OR ")})`;

/** The sessions table; a function of its name so that a layout change can rebuild it beside the old one. */
const sessionsTable = (name: string): string => `CREATE TABLE IF NOT EXISTS ${name} (
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
 * Step records, a kilobyte or two each. A rowid table appends them in commit order, filling one
 * page after another, and only the small (session_id, step) key lands in the middle of an index;
 * keyed by (session_id, step) itself, the rows of the sessions in flight interleave, and each
 * commit split and rewrote pages all over the table.
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

/** What user_version says about a database this build wrote; see migrate(). */
const LAYOUT = 3;
/** Most writes one group commit takes (see `write`). */
const MAX_GROUP_COMMIT = 16;

// The guards repeat in SQL what assertTransition checks in code, so that no code path (an old
// binary, a hand-written UPDATE) can persist a transition outside TRANSITIONS: every state or
// version change must be +1 along an allowed edge, and every audit row must describe the
// session's state right after such a change.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS session_transitions (
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  PRIMARY KEY (from_state, to_state)
) WITHOUT ROWID;

${sessionsTable("sessions")}
CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at, id);
-- Live sessions are keyed on stop_reason, which is set once, when a session ends (the CHECK
-- above ties it to the terminal states). A move between live states changes no indexed column,
-- so it rewrites the session's row and nothing else: an index on state would move an entry
-- with every move, and cost two of the four pages each transition commits.
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

interface SessionRow {
  id: string;
  state: SessionState;
  version: number;
  goal: string;
  task: string;
  budget: string;
  usage: string;
  context: string;
  pending: string | null;
  scopes: string;
  policy: string;
  stop_reason: StopReason | null;
  answer: string | null;
  created_at: number;
  updated_at: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  idempotency_key: string | null;
  history_len: number | null;
  created_by: string;
  request_hash: string | null;
  /** JSON array of context.history, selected by SESSION_COLUMNS; absent from RETURNING *. */
  history?: string | null;
}

type LeaseRow = Pick<SessionRow, "lease_owner" | "lease_expires_at">;

interface AuditRow {
  session_id: string;
  version: number;
  from_state: SessionState;
  to_state: SessionState;
  at: number;
  reason: string | null;
  tool: string | null;
  args_hash: string | null;
  expected_timeout_ms: number | null;
  outcome: string | null;
  owner: string | null;
}

function toRecord(r: SessionRow): SessionRecord {
  return {
    id: r.id,
    state: r.state,
    version: r.version,
    goal: r.goal,
    task: JSON.parse(r.task),
    budget: JSON.parse(r.budget),
    usage: JSON.parse(r.usage),
    context: contextOf(r),
    pending: r.pending === null ? null : JSON.parse(r.pending),
    scopes: JSON.parse(r.scopes),
    policy: r.policy,
    stopReason: r.stop_reason,
    answer: r.answer,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    leaseOwner: r.lease_owner,
    leaseExpiresAt: r.lease_expires_at,
    idempotencyKey: r.idempotency_key,
    createdBy: r.created_by,
    requestHash: r.request_hash,
  };
}

function withoutHistory(context: JsonObject): JsonObject {
  const { history: _history, ...rest } = context;
  return rest;
}

function contextOf(r: SessionRow): JsonObject {
  const context = JSON.parse(r.context) as JsonObject;
  if (r.history_len !== null) context.history = r.history ? (JSON.parse(r.history) as JsonValue[]) : [];
  return context;
}

/**
 * The optimistic-lock UPDATE of one move, with the patch. Only a move into a terminal state sets
 * stop_reason: SQLite maintains the partial indexes keyed on stop_reason only when an UPDATE
 * assigns it. A move into a terminal state or AWAITING_APPROVAL drops the lease. No RETURNING
 * clause: SQLite gathers RETURNING rows in a temporary b-tree built per execution; what the
 * caller needs back is read with leaseOf.
 */
const moveSql = (into: "live" | "awaiting" | "terminal"): string => `UPDATE sessions SET
    state = @to,
    version = version + 1,
    usage = CASE WHEN @setUsage THEN @usage ELSE usage END,
    context = CASE WHEN @setContext THEN @context ELSE context END,
    history_len = CASE WHEN @setContext THEN @historyLen ELSE history_len END,
    pending = CASE WHEN @setPending THEN @pending ELSE pending END,
    answer = CASE WHEN @setAnswer THEN @answer ELSE answer END,${into === "terminal" ? `
    stop_reason = @stopReason,` : ""}${into !== "live" ? `
    lease_owner = NULL,
    lease_expires_at = NULL,` : ""}
    updated_at = @at
  WHERE id = @id AND state = @from AND version = @expectedVersion
    AND (@owner IS NULL OR (lease_owner = @owner AND lease_expires_at > @now))`;

/** A session row with its history items gathered back into one JSON array. */
const SESSION_COLUMNS = `s.*, CASE WHEN s.history_len IS NULL THEN NULL ELSE
  (SELECT json_group_array(json(h.item) ORDER BY h.seq) FROM session_history h WHERE h.session_id = s.id) END AS history`;

function changed(s: SessionRecord): SessionEvent {
  return { kind: "changed", id: s.id, version: s.version, state: s.state, leaseOwner: s.leaseOwner };
}

function toAudit(r: AuditRow): AuditRecord {
  return {
    sessionId: r.session_id,
    version: r.version,
    from: r.from_state,
    to: r.to_state,
    at: r.at,
    reason: r.reason,
    tool: r.tool,
    argsHash: r.args_hash,
    expectedTimeoutMs: r.expected_timeout_ms,
    outcome: r.outcome,
    owner: r.owner,
  };
}

function sqliteCode(err: unknown): string | undefined {
  return err instanceof Database.SqliteError ? err.code : undefined;
}

interface PendingWrite {
  readonly operation: string;
  readonly run: (events: SessionEvent[]) => unknown;
  /** What the write changed, told to subscribers once its commit is done. */
  readonly events: SessionEvent[];
  readonly resolve: (r: never) => void;
  readonly reject: (e: unknown) => void;
}

export interface SqliteSessionStoreOptions extends SessionStoreOptions {
  /**
   * How long a write waits for another process holding the file's write lock before the store
   * reports itself unavailable. The orchestrator is the file's only writer, so a wait means a
   * backup or a hand-run tool; it stays well inside the API's deadlines (better-sqlite3 waits
   * synchronously, holding the event loop).
   */
  readonly busyTimeoutMs?: number;
}

export class SqliteSessionStore implements SessionStore {
  private readonly db: Database.Database;
  private readonly now: () => number;
  private readonly stmt;
  private readonly listStmts;
  private readonly batchTx;
  private readonly savepoint;
  private pendingWrites: PendingWrite[] = [];
  private readonly listeners = new SessionListeners();
  private readonly onUnavailable: ((error: StoreUnavailableError) => void) | undefined;

  constructor(file: string, options: SqliteSessionStoreOptions = {}) {
    this.now = options.now ?? Date.now;
    this.onUnavailable = options.onUnavailable;
    this.db = openSqlite(file, { synchronous: "NORMAL", busyTimeoutMs: options.busyTimeoutMs ?? 1000, foreignKeys: true });
    const existed = this.db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'`).get() !== undefined;
    this.db.exec(SCHEMA);
    if (existed) this.migrate();
    else this.db.pragma(`user_version = ${LAYOUT}`);
    this.syncTransitions();

    const db = this.db;
    this.stmt = {
      // No RETURNING (see moveSql): createNow builds the row, inserts it, and has it.
      insert: db.prepare(
        `INSERT INTO sessions (id, state, version, goal, task, budget, usage, context, pending, scopes, policy,
           stop_reason, answer, created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, created_by, request_hash)
         VALUES (@id, 'IDLE', 0, @goal, @task, @budget, @usage, '{}', NULL, @scopes, @policy,
           NULL, NULL, @created_at, @updated_at, @lease_owner, @lease_expires_at, @idempotency_key, @created_by, @request_hash)
         ON CONFLICT DO NOTHING`,
      ),
      byId: db.prepare<[string], SessionRow>(`SELECT ${SESSION_COLUMNS} FROM sessions s WHERE id = ?`),
      byKey: db.prepare<[string, string], SessionRow>(`SELECT ${SESSION_COLUMNS} FROM sessions s WHERE created_by = ? AND idempotency_key = ?`),
      move: { live: db.prepare(moveSql("live")), awaiting: db.prepare(moveSql("awaiting")), terminal: db.prepare(moveSql("terminal")) },
      // The lease is what a move's caller cannot know: renewals change it without a new version.
      leaseOf: db.prepare<[string], LeaseRow>(`SELECT lease_owner, lease_expires_at FROM sessions WHERE id = ?`),
      hop: db.prepare(
        `UPDATE sessions SET state = @to, version = version + 1, updated_at = @at
         WHERE id = @id AND state = @from AND version = @expectedVersion
           AND (@owner IS NULL OR (lease_owner = @owner AND lease_expires_at > @now))`,
      ),
      audit: db.prepare(
        `INSERT INTO session_audit (session_id, version, from_state, to_state, at, reason, tool, args_hash,
           expected_timeout_ms, outcome, owner)
         VALUES (@id, @version, @from, @to, @at, @reason, @tool, @argsHash, @expectedTimeoutMs, @outcome, @owner)`,
      ),
      appendHistory: db.prepare(`INSERT INTO session_history (session_id, seq, item) VALUES (?, ?, ?)`),
      clearHistory: db.prepare(`DELETE FROM session_history WHERE session_id = ?`),
      auditTrail: db.prepare<[string, number], AuditRow>(`SELECT * FROM session_audit WHERE session_id = ? AND version > ? ORDER BY version`),
      appendStep: db.prepare(`INSERT INTO session_steps (session_id, step, at, payload) VALUES (?, ?, ?, ?)`),
      steps: db.prepare<[string, number], { step: number; at: number; payload: string }>(
        `SELECT step, at, payload FROM session_steps WHERE session_id = ? AND step > ? ORDER BY step`,
      ),
      countByState: db.prepare<[], { state: SessionState; n: number }>(
        `SELECT state, count(*) AS n FROM sessions WHERE ${OPEN_SQL} GROUP BY state
         UNION ALL SELECT state, count(*) AS n FROM sessions WHERE stop_reason IS NOT NULL GROUP BY state`,
      ),
      claim: db.prepare<unknown[], { id: string }>(
        `UPDATE sessions SET lease_owner = @owner, lease_expires_at = @expiresAt
         WHERE id IN (
           SELECT id FROM sessions
           WHERE ${OPEN_SQL} AND state <> 'AWAITING_APPROVAL' AND (lease_owner IS NULL OR lease_expires_at <= @now)
           ORDER BY created_at, id LIMIT @limit)
         RETURNING id`,
      ),
      renew: db.prepare(
        `UPDATE sessions SET lease_expires_at = @expiresAt
         WHERE id = @id AND lease_owner = @owner AND lease_expires_at > @now AND ${OPEN_SQL}`,
      ),
      release: db.prepare<unknown[], { state: SessionState; version: number }>(
        `UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = @id AND lease_owner = @owner RETURNING state, version`,
      ),
      expiredApprovals: db.prepare<unknown[], SessionRow>(
        `SELECT ${SESSION_COLUMNS} FROM sessions s
         WHERE ${OPEN_SQL} AND state = 'AWAITING_APPROVAL' AND json_extract(pending, '$.approval.expiresAt') <= @now
         ORDER BY created_at, id LIMIT @limit`,
      ),
    };
    this.savepoint = db.transaction((run: () => unknown) => run());
    // A write alone in its batch needs no savepoint: if it fails, the whole transaction rolls back.
    this.batchTx = db.transaction((batch: PendingWrite[]) =>
      batch.length === 1
        ? [{ ok: true as const, value: batch[0]!.run(batch[0]!.events) }]
        : batch.map((write) => {
            try {
              return { ok: true as const, value: this.savepoint(() => write.run(write.events)) };
            } catch (error) {
              // Rolled back to its savepoint: what it changed never happened.
              write.events.length = 0;
              return { ok: false as const, error };
            }
          }),
    );
    const page = (where: string) =>
      db.prepare<unknown[], SessionRow>(`SELECT ${SESSION_COLUMNS} FROM sessions s ${where} ORDER BY created_at, id LIMIT @limit`);
    // The stop_reason term, implied by the state, lets SQLite use the partial index it names.
    const inState = (where: string) => ({
      first: page(`WHERE state = @state AND ${where}`),
      after: page(`WHERE state = @state AND ${where} AND (created_at, id) > (@afterAt, @afterId)`),
    });
    this.listStmts = {
      all: { first: page(""), after: page(`WHERE (created_at, id) > (@afterAt, @afterId)`) },
      open: inState(OPEN_SQL),
      ended: inState("stop_reason IS NOT NULL"),
    };
  }

  /**
   * Converts a database written by an earlier build, one layout at a time, each in one
   * transaction. Layout 1: context.history moves out of sessions.context into session_history
   * rows. Layouts 2 and 3 rebuild the sessions table (see below).
   */
  private migrate(): void {
    const layout = () => Number(this.db.pragma("user_version", { simple: true }));
    if (layout() < 1) {
      this.db
        .transaction(() => {
          const columns = this.db.prepare<[], string>(`SELECT name FROM pragma_table_info('sessions')`).pluck().all();
          if (!columns.includes("history_len")) this.db.exec(`ALTER TABLE sessions ADD COLUMN history_len INTEGER`);
          this.db.exec(`
            INSERT INTO session_history (session_id, seq, item)
              SELECT s.id, j.key, CASE WHEN j.type IN ('object', 'array') THEN j.value ELSE json_quote(j.value) END
              FROM sessions s, json_each(s.context, '$.history') j
              WHERE json_type(s.context, '$.history') = 'array';
            UPDATE sessions SET history_len = json_array_length(context, '$.history'), context = json_remove(context, '$.history')
              WHERE json_type(context, '$.history') = 'array';
            PRAGMA user_version = 1;`);
        })
        .immediate();
    }
    if (layout() < LAYOUT) {
      // SQLite's procedure for changing a table's constraints: a new table, the rows copied, the
      // old one dropped, with foreign keys off (they can only be switched outside a transaction)
      // and checked before the commit. The triggers that name sessions go first and come back
      // with SCHEMA. Layout 2 rebuilt the table with CHECKs spelled without IN lists (see oneOf)
      // and made session_steps a rowid table; layout 3 adds the creator and the request hash, and
      // scopes idempotency keys by creator (rows from before have creator '').
      const rebuildSteps = layout() < 2;
      this.db.pragma("foreign_keys = OFF");
      try {
        this.db
          .transaction(() => {
            this.db.exec(`
              DROP TRIGGER IF EXISTS sessions_start_idle;
              DROP TRIGGER IF EXISTS sessions_transition_guard;
              DROP TRIGGER IF EXISTS session_audit_guard;
              ${sessionsTable("sessions_rebuilt")}
              INSERT INTO sessions_rebuilt (${LAYOUT2_COLUMN_NAMES}) SELECT ${LAYOUT2_COLUMN_NAMES} FROM sessions;
              DROP TABLE sessions;
              ALTER TABLE sessions_rebuilt RENAME TO sessions;`);
            if (rebuildSteps) {
              this.db.exec(`
                ${stepsTable("session_steps_rebuilt")}
                INSERT INTO session_steps_rebuilt (session_id, step, at, payload) SELECT session_id, step, at, payload FROM session_steps;
                DROP TABLE session_steps;
                ALTER TABLE session_steps_rebuilt RENAME TO session_steps;`);
            }
            this.db.exec(`${SCHEMA}
              PRAGMA user_version = ${LAYOUT};`);
            const broken = this.db.pragma("foreign_key_check") as unknown[];
            if (broken.length > 0) throw new Error(`layout ${LAYOUT}: ${broken.length} rows would lose their session`);
          })
          .immediate();
      } finally {
        this.db.pragma("foreign_keys = ON");
      }
    }
  }

  /** Makes the database's copy of TRANSITIONS match this build's. */
  private syncTransitions(): void {
    const insert = this.db.prepare(`INSERT INTO session_transitions (from_state, to_state) VALUES (?, ?)`);
    this.db
      .transaction(() => {
        this.db.exec(`DELETE FROM session_transitions`);
        for (const [from, to] of TRANSITION_PAIRS) insert.run(from, to);
      })
      .immediate();
  }

  async create(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    return this.write("create", (events) => {
      const result = this.createNow(input);
      if (result.created) events.push(changed(result.session));
      return result;
    });
  }

  private createNow(input: NewSession): { session: SessionRecord; created: boolean } {
    const now = this.now();
    const row: SessionRow = {
      id: input.id,
      state: "IDLE",
      version: 0,
      goal: input.goal,
      task: JSON.stringify(input.task),
      budget: JSON.stringify(input.budget),
      usage: JSON.stringify(initialUsage(now)),
      context: "{}",
      pending: null,
      scopes: JSON.stringify(input.scopes),
      policy: input.policy,
      stop_reason: null,
      answer: null,
      created_at: now,
      updated_at: now,
      lease_owner: input.lease?.owner ?? null,
      lease_expires_at: input.lease ? now + input.lease.ttlMs : null,
      idempotency_key: input.idempotencyKey ?? null,
      history_len: null,
      created_by: input.createdBy,
      request_hash: input.requestHash ?? null,
    };
    if (this.stmt.insert.run(row).changes === 1) return { session: toRecord(row), created: true };
    if (input.idempotencyKey !== undefined) {
      const existing = this.stmt.byKey.get(input.createdBy, input.idempotencyKey);
      if (existing) return { session: toRecord(existing), created: false };
    }
    throw new SessionExistsError(input.id);
  }

  async get(id: string): Promise<SessionRecord | null> {
    const row = this.read("get", () => this.stmt.byId.get(id));
    return row ? toRecord(row) : null;
  }

  async list(query: ListQuery): Promise<SessionPage> {
    checkLimit(query.limit);
    const after = query.after === undefined ? undefined : decodeCursor(query.after);
    const stmts = query.state === undefined ? this.listStmts.all : isTerminal(query.state) ? this.listStmts.ended : this.listStmts.open;
    const stmt = after ? stmts.after : stmts.first;
    const rows = this.read("list", () => stmt.all({
      limit: query.limit + 1,
      ...(query.state === undefined ? {} : { state: query.state }),
      ...(after ? { afterAt: after.createdAt, afterId: after.id } : {}),
    }));
    const sessions = rows.slice(0, query.limit).map((r) => toRecord(r));
    const last = sessions.at(-1);
    return { sessions, nextCursor: rows.length > query.limit && last ? encodeCursor(last) : null };
  }

  async countByState(): Promise<Record<SessionState, number>> {
    const counts = emptyCounts();
    for (const { state, n } of this.read("countByState", () => this.stmt.countByState.all())) counts[state] = n;
    return counts;
  }

  /**
   * Group commit: writes asked for in the same turn of the event loop (many sessions moving at
   * once) run in one transaction, each in its own savepoint, so one commit serves them all. Each
   * caller is answered only after that commit, with its own result or error (a refused write
   * leaves no trace); a failed commit fails them all.
   *
   * A commit takes at most MAX_GROUP_COMMIT writes, the rest wait for the next turn, so that tools
   * work while the rest are committed (docs/performance.md, "Group commit").
   */
  private write<T>(operation: string, run: (events: SessionEvent[]) => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pendingWrites.push({ operation, run, events: [], resolve: resolve as (r: never) => void, reject });
      if (this.pendingWrites.length === 1) setImmediate(() => this.flushWrites());
    });
  }

  private flushWrites(): void {
    const batch = this.pendingWrites.splice(0, MAX_GROUP_COMMIT);
    if (this.pendingWrites.length > 0) setImmediate(() => this.flushWrites());
    let outcomes: ({ ok: true; value: unknown } | { ok: false; error: unknown })[];
    try {
      outcomes = this.batchTx.immediate(batch);
    } catch (error) {
      for (const item of batch) item.reject(this.unavailableOr(item.operation, error));
      return;
    }
    outcomes.forEach((outcome, i) => {
      const item = batch[i]!;
      if (!outcome.ok) return item.reject(this.unavailableOr(item.operation, outcome.error));
      for (const event of item.events) this.listeners.emit(event);
      item.resolve(outcome.value as never);
    });
  }

  /** A read, with a database that cannot serve reported as StoreUnavailableError. */
  private read<T>(operation: string, run: () => T): T {
    try {
      return run();
    } catch (error) {
      throw this.unavailableOr(operation, error);
    }
  }

  private unavailableOr(operation: string, error: unknown): unknown {
    if (!isSqliteUnavailable(error)) return error;
    const unavailable = new StoreUnavailableError(operation, error);
    this.onUnavailable?.(unavailable);
    return unavailable;
  }

  async transition(t: TransitionInput): Promise<SessionRecord> {
    const moves = movesOf(t);
    return this.write("transition", (events) => {
      const record = this.applyOne(t, moves);
      events.push(changed(record));
      return record;
    });
  }

  /** One transition, with database errors turned into the store's own. */
  private applyOne(t: TransitionInput, moves: readonly Move[]): SessionRecord {
    try {
      return this.applyTransition(t, moves);
    } catch (err) {
      // Only reached if code and database disagree about TRANSITIONS (e.g. an older binary's table).
      const code = sqliteCode(err);
      if (code === "SQLITE_CONSTRAINT_TRIGGER" || code === "SQLITE_CONSTRAINT_CHECK") {
        throw new IllegalTransitionError(t.from, t.to, `refused by the database: ${(err as Error).message}`);
      }
      if (code === "SQLITE_CONSTRAINT_PRIMARYKEY" && t.step) throw new DuplicateStepError(t.id, t.step.step);
      throw err;
    }
  }

  /**
   * Runs in a savepoint of the write batch: per move, the optimistic-lock UPDATE and its audit
   * row; the last move carries the patch, and the step.
   */
  private applyTransition(t: TransitionInput, moves: readonly Move[]): SessionRecord {
    const patch = t.patch ?? {};
    const owner = t.owner ?? null;
    const now = this.now();
    let record: SessionRecord | undefined;
    for (const [i, move] of moves.entries()) {
      if (i < moves.length - 1) {
        const hop = { id: t.id, from: move.from, to: move.to, expectedVersion: move.version - 1, at: move.audit.at, owner, now };
        if (this.stmt.hop.run(hop).changes !== 1) throw this.whyNotApplied(t);
      } else {
        // One literal with every key, not a spread plus added keys: a literal has one shape, a
        // spread builds its shape key by key, and V8 builds it again after each full GC.
        const values = {
          id: t.id,
          from: move.from,
          to: move.to,
          expectedVersion: move.version - 1,
          at: move.audit.at,
          owner,
          now,
          setUsage: patch.usage === undefined ? 0 : 1,
          usage: patch.usage === undefined ? null : JSON.stringify(patch.usage),
          setContext: patch.context === undefined ? 0 : 1,
          context: patch.context === undefined ? null : JSON.stringify(withoutHistory(patch.context)),
          historyLen: Array.isArray(patch.context?.history) ? patch.context.history.length : null,
          setPending: patch.pending === undefined ? 0 : 1,
          pending: patch.pending == null ? null : JSON.stringify(patch.pending),
          setAnswer: patch.answer === undefined ? 0 : 1,
          answer: patch.answer ?? null,
          stopReason: patch.stopReason ?? null,
        };
        const into = isTerminal(move.to) ? "terminal" : releasesLease(move.to) ? "awaiting" : "live";
        if (this.stmt.move[into].run(values).changes !== 1) throw this.whyNotApplied(t);
        if (t.current) {
          // The row is what the record moved from plus the patch: version and update time come
          // from the move itself, the lease from the row (a renewal may have changed it).
          const lease = into === "live" ? this.stmt.leaseOf.get(t.id)! : { lease_owner: null, lease_expires_at: null };
          record = {
            ...t.current,
            ...(patch.usage !== undefined ? { usage: patch.usage } : {}),
            ...(patch.context !== undefined ? { context: patch.context } : {}),
            ...(patch.pending !== undefined ? { pending: patch.pending } : {}),
            ...(patch.answer !== undefined ? { answer: patch.answer } : {}),
            state: move.to,
            stopReason: patch.stopReason ?? null,
            version: move.version,
            updatedAt: move.audit.at,
            leaseOwner: lease.lease_owner,
            leaseExpiresAt: lease.lease_expires_at,
          };
        }
      }
      this.stmt.audit.run({
        id: t.id,
        version: move.version,
        from: move.from,
        to: move.to,
        at: move.audit.at,
        reason: move.audit.reason ?? null,
        tool: move.audit.tool ?? null,
        argsHash: move.audit.argsHash ?? null,
        expectedTimeoutMs: move.audit.expectedTimeoutMs ?? null,
        outcome: move.audit.outcome ?? null,
        owner,
      });
    }
    if (patch.context !== undefined) this.writeHistory(t.id, patch.context.history, t.current?.context.history);
    if (t.step) this.stmt.appendStep.run(t.id, t.step.step, t.step.at, t.step.json ?? JSON.stringify(t.step.payload));
    return record ?? toRecord(this.stmt.byId.get(t.id)!);
  }

  /**
   * Stores context.history as rows. When the new history extends the one the caller moved from
   * (the same items, by identity, then more), only the new items are inserted; otherwise (a
   * compression rewrote old items, or the caller passed no record) the rows are replaced.
   */
  private writeHistory(id: string, history: JsonValue | undefined, before: JsonValue | undefined): void {
    const items = Array.isArray(history) ? history : [];
    const kept = Array.isArray(before) && before.length <= items.length && before.every((item, i) => items[i] === item) ? before.length : 0;
    if (kept === 0) this.stmt.clearHistory.run(id);
    for (let seq = kept; seq < items.length; seq += 1) this.stmt.appendHistory.run(id, seq, itemJson(items[seq]!));
  }

  private whyNotApplied(t: TransitionInput): Error {
    const row = this.stmt.byId.get(t.id);
    if (!row) return new SessionNotFoundError(t.id);
    const actual = { state: row.state, version: row.version };
    if (row.state !== t.from || row.version !== t.expectedVersion) {
      return new StaleTransitionError(t.id, { state: t.from, version: t.expectedVersion }, actual);
    }
    return new LeaseLostError(t.id, actual, t.owner ?? "", row.lease_owner);
  }

  async steps(sessionId: string, afterStep = 0): Promise<StepRecord[]> {
    return this.read("steps", () => this.stmt.steps.all(sessionId, afterStep)).map((r) => ({ step: r.step, at: r.at, payload: JSON.parse(r.payload) }));
  }

  async auditTrail(sessionId: string, afterVersion = 0): Promise<AuditRecord[]> {
    return this.read("auditTrail", () => this.stmt.auditTrail.all(sessionId, afterVersion)).map(toAudit);
  }

  async claim(owner: string, ttlMs: number, limit: number): Promise<SessionRecord[]> {
    if (owner === "") throw new RangeError("owner must not be empty");
    checkTtl(ttlMs);
    checkLimit(limit);
    const now = this.now();
    const rows = await this.write("claim", () =>
      this.stmt.claim.all({ owner, expiresAt: now + ttlMs, now, limit }).map(({ id }) => this.stmt.byId.get(id)!),
    );
    return rows.map((r) => toRecord(r)).sort(byCreated);
  }

  async renewLease(id: string, owner: string, ttlMs: number): Promise<boolean> {
    checkTtl(ttlMs);
    const now = this.now();
    return this.write("renewLease", () => this.stmt.renew.run({ id, owner, now, expiresAt: now + ttlMs }).changes === 1);
  }

  async releaseLease(id: string, owner: string): Promise<boolean> {
    return this.write("releaseLease", (events) => {
      const row = this.stmt.release.get({ id, owner });
      if (row) events.push({ kind: "changed", id, version: row.version, state: row.state, leaseOwner: null });
      return row !== undefined;
    });
  }

  async expiredApprovals(now: number, limit: number): Promise<SessionRecord[]> {
    checkLimit(limit);
    return this.read("expiredApprovals", () => this.stmt.expiredApprovals.all({ now, limit })).map((r) => toRecord(r));
  }

  /** Listeners hear of the commits of this store instance only: SQLite serves one process. */
  subscribe(listener: SessionListener): () => void {
    return this.listeners.add(listener);
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}
