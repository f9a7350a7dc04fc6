// The SQLite session store's prepared statements: reads, pages, claims, wakes and the lease.
import type Database from "better-sqlite3";
import { OPEN_SQL } from "../migrations/sqlite/index.js";
import type { SessionState } from "../session/session-state.js";
import { TERMINAL_SQL } from "./session-sql.js";
import type { StoredSpend } from "./session-store-support.js";
import type {
  AuditRow,
  ChargeParams,
  ClaimParams,
  InsertParams,
  MoveParams,
  SessionRow,
  StepRow,
  VisibilityParams,
  WakeParams,
} from "./sql-session-rows.js";
import {
  CHARGE_SQL,
  COUNT_SQL,
  IN_FLIGHT_SQL,
  KEYSET_SQL,
  moveSql,
  ownOrWaitingPageSql,
  pageSql,
  SESSION_COLUMNS,
  TAKEOVER_SQL,
} from "./sqlite-session-sql.js";

const RUNNABLE_SQL = `${OPEN_SQL} AND state <> 'AWAITING_APPROVAL' AND state <> 'PARKED'`;

/**
 * The sessions a claim takes, fair across creators: each creator's waiting sessions take turns after
 * the ones of theirs already driven (leased), oldest first, so one caller's backlog (up to its quota,
 * far more than a replica's slots) never holds back another caller's session. The queue is read
 * along sessions_claimable, the driven counts along sessions_by_creator_open for its creators only.
 */
const FAIR_CLAIM_SQL = `
  WITH queued AS (
    SELECT id, created_by, created_at FROM sessions
    WHERE ${RUNNABLE_SQL} AND (lease_owner IS NULL OR lease_expires_at <= @now)),
  driven AS (
    SELECT created_by, count(*) AS n FROM sessions
    WHERE created_by IN (SELECT created_by FROM queued) AND ${RUNNABLE_SQL} AND lease_expires_at > @now
    GROUP BY created_by)
  SELECT q.id FROM (
    SELECT id, created_by, created_at, row_number() OVER (PARTITION BY created_by ORDER BY created_at, id) AS turn
    FROM queued) q
  LEFT JOIN driven d ON d.created_by = q.created_by
  ORDER BY q.turn + coalesce(d.n, 0), q.created_at, q.id LIMIT @limit`;

/** The spend a session's stored usage holds; `retries` null when it has none. */
export type StoredSpendRow = Omit<StoredSpend, "retries"> & { readonly retries: number | null };

/** What the store calls on a prepared statement; declared here, as the driver's own type cannot be exported. */
export interface Prepared<P extends unknown[], R> {
  run(...params: P): Database.RunResult;
  get(...params: P): R | undefined;
  all(...params: P): R[];
}

/** The store's statements, prepared once on its connection. */
export function prepare(db: Database.Database) {
  const stmt = <P extends unknown[] = unknown[], R = unknown>(sql: string): Prepared<P, R> => db.prepare<P, R>(sql);
  const page = (where: string) => stmt<unknown[], SessionRow>(pageSql(where));
  // The stop_reason term, implied by the state, lets SQLite use the partial index it names.
  const pages = (where: string) => ({ first: page(where), after: page(`${where} AND ${KEYSET_SQL}`) });
  const counts = (sql: string) => stmt<[VisibilityParams], { state: SessionState; n: number }>(sql);
  return {
    // No RETURNING (see moveSql): the store builds the row it inserts.
    insert: stmt<[InsertParams]>(
      `INSERT INTO sessions (id, state, version, goal, task, budget, usage, context, pending, scopes, policy,
         stop_reason, answer, created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, created_by, request_hash)
       VALUES (@id, 'IDLE', 0, @goal, @task, @budget, @usage, '{}', NULL, @scopes, @policy,
         NULL, NULL, @now, @now, @leaseOwner, @leaseExpiresAt, @idempotencyKey, @createdBy, @requestHash)
       ON CONFLICT DO NOTHING`,
    ),
    byId: stmt<[{ id: string }], SessionRow>(`SELECT ${SESSION_COLUMNS} FROM sessions s WHERE id = @id`),
    byKey: stmt<[{ createdBy: string; key: string }], SessionRow>(
      `SELECT ${SESSION_COLUMNS} FROM sessions s WHERE created_by = @createdBy AND idempotency_key = @key`,
    ),
    move: {
      live: stmt<[MoveParams]>(moveSql("live")),
      awaiting: stmt<[MoveParams]>(moveSql("awaiting")),
      terminal: stmt<[MoveParams]>(moveSql("terminal")),
    },
    // What a move's caller cannot know: renewals change the lease, and charges the spend, without a new version.
    leaseOf: stmt<[{ id: string }], Pick<SessionRow, "lease_owner" | "lease_expires_at"> & StoredSpendRow>(
      `SELECT lease_owner, lease_expires_at, json_extract(usage, '$.tokens') AS tokens,
         json_extract(usage, '$.costMicros') AS costMicros, json_extract(usage, '$.toolCalls') AS toolCalls,
         json_extract(usage, '$.retries') AS retries
       FROM sessions WHERE id = @id`,
    ),
    hop: stmt<[MoveParams]>(
      `UPDATE sessions SET state = @to, version = version + 1, updated_at = @at
       WHERE id = @id AND state = @from AND version = @expectedVersion
         AND (@owner IS NULL OR (lease_owner = @owner AND lease_expires_at > @now))`,
    ),
    audit: stmt<[MoveParams]>(
      `INSERT INTO session_audit (session_id, version, from_state, to_state, at, reason, tool, args_hash, expected_timeout_ms, outcome, owner)
       VALUES (@id, @version, @from, @to, @at, @reason, @tool, @argsHash, @expectedTimeoutMs, @outcome, @owner)`,
    ),
    appendHistory: stmt<[{ id: string; seq: number; item: string }]>(
      `INSERT INTO session_history (session_id, seq, item) VALUES (@id, @seq, @item)`,
    ),
    clearHistory: stmt<[MoveParams]>(`DELETE FROM session_history WHERE session_id = @id`),
    appendStep: stmt<[MoveParams]>(
      `INSERT INTO session_steps (session_id, step, at, payload) VALUES (@id, @step, @stepAt, @stepPayload)`,
    ),
    auditTrail: stmt<[{ id: string; after: number }], AuditRow>(
      `SELECT * FROM session_audit WHERE session_id = @id AND version > @after ORDER BY version`,
    ),
    // Oldest first by the step's own time (index session_steps_by_at), joined to the session's state.
    pruneSteps: stmt<[{ before: number; limit: number }]>(
      `DELETE FROM session_steps WHERE rowid IN (
        SELECT st.rowid FROM session_steps st JOIN sessions s ON s.id = st.session_id
        WHERE st.at < @before AND s.state IN (${TERMINAL_SQL}) ORDER BY st.at LIMIT @limit)`,
    ),
    oldestStep: stmt<[], { at: number | null }>(`SELECT min(at) AS at FROM session_steps`),
    steps: stmt<[{ id: string; after: number }], StepRow>(
      `SELECT step, at, payload FROM session_steps WHERE session_id = @id AND step > @after ORDER BY step`,
    ),
    countByState: {
      all: counts(COUNT_SQL.all),
      own: counts(COUNT_SQL.own),
      ownOrWaiting: counts(COUNT_SQL.ownOrWaiting),
    },
    // The quota's count, along sessions_by_creator_open: only the creator's live sessions are read.
    inFlight: stmt<[InsertParams], { n: number }>(IN_FLIGHT_SQL),
    keyTaken: stmt<[InsertParams], { id: string }>(
      `SELECT id FROM sessions WHERE created_by = @createdBy AND idempotency_key = @idempotencyKey`,
    ),
    claim: stmt<[ClaimParams], { id: string }>(
      `UPDATE sessions SET lease_owner = @owner, lease_expires_at = @expiresAt, ${TAKEOVER_SQL}
       WHERE id IN (${FAIR_CLAIM_SQL})
       RETURNING id`,
    ),
    // Due by the clock along sessions_parked; due by a tool's recovery only when one recovered.
    wakeDue: stmt<[WakeParams], { id: string }>(
      `UPDATE sessions SET lease_owner = @owner, lease_expires_at = @expiresAt, ${TAKEOVER_SQL}
       WHERE id IN (
         SELECT id FROM sessions
         WHERE state = 'PARKED' AND json_extract(pending, '$.park.wakeAt') <= @now AND (lease_owner IS NULL OR lease_expires_at <= @now)
         ORDER BY json_extract(pending, '$.park.wakeAt'), created_at, id LIMIT @limit)
       RETURNING id`,
    ),
    wakeRecovered: stmt<[WakeParams], { id: string }>(
      `UPDATE sessions SET lease_owner = @owner, lease_expires_at = @expiresAt, ${TAKEOVER_SQL}
       WHERE id IN (
         SELECT s.id FROM sessions s, json_each(@recovered) r
         WHERE s.state = 'PARKED' AND (s.lease_owner IS NULL OR s.lease_expires_at <= @now)
           AND r.key = json_extract(s.pending, '$.park.tool') AND json_extract(s.pending, '$.park.parkedAt') < r.value
         ORDER BY json_extract(s.pending, '$.park.wakeAt'), s.created_at, s.id LIMIT @limit)
       RETURNING id`,
    ),
    overdue: stmt<[{ now: number }], { approvals: number; parked: number }>(
      `SELECT
         (SELECT count(*) FROM sessions WHERE ${OPEN_SQL} AND state = 'AWAITING_APPROVAL' AND json_extract(pending, '$.approval.expiresAt') <= @now) AS approvals,
         (SELECT count(*) FROM sessions WHERE state = 'PARKED'
            AND json_extract(usage, '$.startedAt') + json_extract(budget, '$.deadlineMs') - @now < json_extract(budget, '$.deadlineMs') / 5) AS parked`,
    ),
    renew: stmt<[{ ids: string; owner: string; now: number; expiresAt: number }], { id: string }>(
      `UPDATE sessions SET lease_expires_at = @expiresAt
       WHERE id IN (SELECT value FROM json_each(@ids)) AND lease_owner = @owner AND lease_expires_at > @now AND ${OPEN_SQL}
       RETURNING id`,
    ),
    release: stmt<[{ id: string; owner: string }], Pick<SessionRow, "id" | "state" | "version" | "lease_owner">>(
      `UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = @id AND lease_owner = @owner RETURNING id, state, version, lease_owner`,
    ),
    charge: stmt<[ChargeParams], { ended: 0 | 1 }>(CHARGE_SQL),
    // Along sessions_approval_expiry, named: with no statistics the planner would rather read every
    // open session in creation order (sessions_open) than sort the few expired ones.
    expiredApprovals: stmt<[{ now: number; limit: number }], SessionRow>(
      `SELECT ${SESSION_COLUMNS} FROM sessions s INDEXED BY sessions_approval_expiry
       WHERE ${OPEN_SQL} AND state = 'AWAITING_APPROVAL' AND json_extract(pending, '$.approval.expiresAt') <= @now
       ORDER BY created_at, id LIMIT @limit`,
    ),
    pages: {
      all: { first: page(""), after: page(`WHERE ${KEYSET_SQL}`) },
      open: pages(`WHERE state = @state AND ${OPEN_SQL}`),
      ended: pages(`WHERE state = @state AND stop_reason IS NOT NULL`),
      own: pages(`WHERE created_by = @createdBy`),
      ownInState: pages(`WHERE created_by = @createdBy AND state = @state`),
      ownOrWaiting: {
        first: stmt<unknown[], SessionRow>(ownOrWaitingPageSql("")),
        after: stmt<unknown[], SessionRow>(ownOrWaitingPageSql(` AND ${KEYSET_SQL}`)),
      },
    },
  };
}
