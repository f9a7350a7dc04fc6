// The PostgreSQL session store's named statements: a transition as one data-modifying CTE, a claim
// and a wake as one UPDATE over a FOR UPDATE SKIP LOCKED subquery, leases on the database's clock.
import type pg from "pg";
import {
  CHARGE_SQL,
  COLUMNS,
  DB_NOW_MS,
  HISTORY,
  MOVE_USAGE,
  SESSION,
  type Statement,
  statement,
  TAKEOVER,
} from "./postgres-session-sql.js";
import { LIVE_SQL, TERMINAL_SQL } from "./session-sql.js";

/** The store's named statements, parsed once per connection. */
const RUNNABLE_SQL = `${LIVE_SQL} AND state <> 'AWAITING_APPROVAL' AND state <> 'PARKED'`;

/**
 * The sessions a claim takes, fair across creators: each creator's waiting sessions take turns after
 * the ones of theirs already driven (leased), oldest first, so one caller's backlog (up to its quota,
 * far more than a replica's slots) never holds back another caller's session. The turns are read
 * without locks; the rows taken are locked, skipping those a concurrent claim holds.
 */
const FAIR_CLAIM_SQL = `
  WITH queued AS (
    SELECT id, created_by, created_at FROM sessions
    WHERE ${RUNNABLE_SQL} AND (lease_owner IS NULL OR lease_expires_at <= ${DB_NOW_MS})),
  driven AS (
    SELECT created_by, count(*) AS n FROM sessions
    WHERE created_by IN (SELECT created_by FROM queued) AND ${RUNNABLE_SQL} AND lease_expires_at > ${DB_NOW_MS}
    GROUP BY created_by),
  turns AS (
    SELECT q.id, q.created_at,
      row_number() OVER (PARTITION BY q.created_by ORDER BY q.created_at, q.id) + coalesce(d.n, 0) AS turn
    FROM queued q LEFT JOIN driven d ON d.created_by = q.created_by)
  SELECT c.id FROM sessions c JOIN turns t ON t.id = c.id
  WHERE c.state NOT IN (${TERMINAL_SQL}, 'AWAITING_APPROVAL', 'PARKED') AND (c.lease_owner IS NULL OR c.lease_expires_at <= ${DB_NOW_MS})
  ORDER BY t.turn, t.created_at, t.id LIMIT :limit
  FOR UPDATE OF c SKIP LOCKED`;

export const Q = {
  insert: statement(
    "lg_session_insert",
    `INSERT INTO sessions (id, state, version, goal, task, budget, usage, context, pending, scopes, policy,
      stop_reason, answer, created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, created_by, request_hash)
    VALUES (:id, 'IDLE', 0, :goal, :task::jsonb, :budget::jsonb, :usage::jsonb, '{}'::jsonb, NULL, :scopes::jsonb, :policy, NULL, NULL,
      :now, :now, :leaseOwner, CASE WHEN :leaseTtlMs::bigint IS NULL THEN NULL ELSE ${DB_NOW_MS} + :leaseTtlMs::bigint END,
      :idempotencyKey, :createdBy, :requestHash)
    ON CONFLICT (created_by, idempotency_key) DO NOTHING
    RETURNING ${COLUMNS}`,
  ),
  byId: statement("lg_session_by_id", `${SESSION} WHERE id = :id`),
  byKey: statement("lg_session_by_key", `${SESSION} WHERE created_by = :createdBy AND idempotency_key = :key`),
  // RETURNING sees the history rows as they were before the statement: gathered only when the move keeps them.
  transition: statement(
    "lg_transition",
    `WITH moved AS (
      UPDATE sessions s SET
        state = :to,
        version = version + 1,
        usage = ${MOVE_USAGE},
        context = CASE WHEN :setContext::int = 1 THEN :context::jsonb ELSE context END,
        history_len = CASE WHEN :setContext::int = 1 THEN :historyLen::int ELSE history_len END,
        pending = CASE WHEN :setPending::int = 1 THEN :pending::jsonb ELSE pending END,
        answer = CASE WHEN :setAnswer::int = 1 THEN :answer::text ELSE answer END,
        stop_reason = :stopReason::text,
        updated_at = :at,
        lease_owner = CASE WHEN :releasesLease::int = 1 THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN :releasesLease::int = 1 THEN NULL ELSE lease_expires_at END
      WHERE id = :id AND state = :from AND version = :expectedVersion
        AND (:owner::text IS NULL OR (lease_owner = :owner::text AND lease_expires_at > ${DB_NOW_MS}))
      RETURNING ${COLUMNS}, CASE WHEN :setContext::int = 1 THEN NULL ELSE ${HISTORY} END AS history
    ), audited AS (
      INSERT INTO session_audit (session_id, version, from_state, to_state, at, reason, tool, args_hash, expected_timeout_ms, outcome, owner)
      SELECT id, version, :from, :to, :at, :reason, :tool, :argsHash, :expectedTimeoutMs, :outcome, :owner FROM moved
    ), trimmed AS (
      DELETE FROM session_history h USING moved m
      WHERE :setContext::int = 1 AND h.session_id = m.id AND h.seq >= coalesce(:historyLen::int, 0)
    ), appended AS (
      INSERT INTO session_history (session_id, seq, item)
      SELECT m.id, :historyKept::int + i.ord - 1, i.item FROM moved m, jsonb_array_elements(:historyItems::jsonb) WITH ORDINALITY AS i (item, ord)
      ON CONFLICT (session_id, seq) DO UPDATE SET item = EXCLUDED.item
    ), stepped AS (
      INSERT INTO session_steps (session_id, step, at, payload)
      SELECT id, :step::int, :stepAt, :stepPayload::jsonb FROM moved WHERE :step::int IS NOT NULL
    )
    SELECT * FROM moved`,
  ),
  auditTrail: statement(
    "lg_audit_trail",
    `SELECT * FROM session_audit WHERE session_id = :id AND version > :after ORDER BY version`,
  ),
  steps: statement(
    "lg_steps",
    `SELECT step, at, payload FROM session_steps WHERE session_id = :id AND step > :after ORDER BY step`,
  ),
  claim: statement(
    "lg_claim",
    `UPDATE sessions s SET lease_owner = :owner, lease_expires_at = ${DB_NOW_MS} + :ttlMs::bigint, ${TAKEOVER}
    WHERE id IN (${FAIR_CLAIM_SQL})
    RETURNING ${COLUMNS}, ${HISTORY} AS history`,
  ),
  // Wake times are the orchestrators' clock (they set them), so `:now` is too; leases stay on the database's.
  wake: statement(
    "lg_wake",
    `UPDATE sessions s SET lease_owner = :owner, lease_expires_at = ${DB_NOW_MS} + :ttlMs::bigint, ${TAKEOVER}
    WHERE id IN (
      SELECT id FROM sessions
      WHERE state = 'PARKED' AND (lease_owner IS NULL OR lease_expires_at <= ${DB_NOW_MS})
        AND ((pending->'park'->>'wakeAt')::bigint <= :now
          OR (pending->'park'->>'parkedAt')::bigint < ((:recovered::jsonb)->>(pending->'park'->>'tool'))::bigint)
      ORDER BY (pending->'park'->>'wakeAt')::bigint, created_at, id LIMIT :limit
      FOR UPDATE SKIP LOCKED)
    RETURNING ${COLUMNS}, ${HISTORY} AS history`,
  ),
  overdue: statement(
    "lg_overdue",
    `SELECT
      (SELECT count(*) FROM sessions WHERE state = 'AWAITING_APPROVAL' AND (pending->'approval'->>'expiresAt')::numeric <= :now) AS approvals,
      (SELECT count(*) FROM sessions WHERE state = 'PARKED'
        AND (usage->>'startedAt')::numeric + (budget->>'deadlineMs')::numeric - :now < (budget->>'deadlineMs')::numeric / 5) AS parked`,
  ),
  renew: statement(
    "lg_renew",
    `UPDATE sessions SET lease_expires_at = ${DB_NOW_MS} + :ttlMs::bigint
    WHERE id IN (SELECT jsonb_array_elements_text(:ids::jsonb)) AND lease_owner = :owner AND lease_expires_at > ${DB_NOW_MS} AND ${LIVE_SQL}
    RETURNING id`,
  ),
  release: statement(
    "lg_release",
    `UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL WHERE id = :id AND lease_owner = :owner`,
  ),
  insertPatrolRun: statement(
    "lg_insert_patrol_run",
    `INSERT INTO patrol_runs (run_id, finished_at, run) VALUES (:run_id, :finished_at, :run)`,
  ),
  patrolRuns: statement(
    "lg_patrol_runs",
    `SELECT * FROM patrol_runs ORDER BY finished_at DESC, run_id DESC LIMIT :limit`,
  ),
  charge: statement("lg_charge", CHARGE_SQL),
  // The expired ones first, along sessions_approval_expiry: asked for the oldest sessions at once,
  // the planner would rather read every open session in creation order and filter.
  expiredApprovals: statement(
    "lg_expired_approvals",
    `WITH due AS MATERIALIZED (
      SELECT id, created_at FROM sessions
      WHERE state = 'AWAITING_APPROVAL' AND (pending->'approval'->>'expiresAt')::numeric <= :now)
    ${SESSION}
    WHERE s.id = ANY (ARRAY(SELECT id FROM due ORDER BY created_at, id LIMIT :limit))
    ORDER BY created_at, id`,
  ),
  // SKIP LOCKED: replicas pruning at once each take other rows instead of waiting on one another.
  pruneSteps: statement(
    "lg_prune_steps",
    `DELETE FROM session_steps WHERE (session_id, step) IN (
      SELECT st.session_id, st.step FROM session_steps st JOIN sessions s ON s.id = st.session_id
      WHERE st.at < :before AND s.state IN (${TERMINAL_SQL}) ORDER BY st.at LIMIT :limit
      FOR UPDATE OF st SKIP LOCKED)`,
  ),
  oldestStep: statement("lg_oldest_step", `SELECT min(at) AS at FROM session_steps`),
  all: statement("lg_list_all", `${SESSION} ORDER BY created_at, id LIMIT :limit`),
  allAfter: statement(
    "lg_list_all_after",
    `${SESSION} WHERE (created_at, id) > (:afterAt, :afterId) ORDER BY created_at, id LIMIT :limit`,
  ),
  state: statement("lg_list_state", `${SESSION} WHERE state = :state ORDER BY created_at, id LIMIT :limit`),
  stateAfter: statement(
    "lg_list_state_after",
    `${SESSION} WHERE state = :state AND (created_at, id) > (:afterAt, :afterId) ORDER BY created_at, id LIMIT :limit`,
  ),
} as const;

export type Params = object;
/** Values in the statement's order; a list of JSON texts (history items) goes as one JSON array. */
export const bind = (s: Statement, params: Params): pg.QueryConfig => ({
  name: s.name,
  text: s.text,
  values: s.names.map((n) => {
    const value = (params as Record<string, unknown>)[n];
    return Array.isArray(value) ? `[${value.join(",")}]` : value;
  }),
});
