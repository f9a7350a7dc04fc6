// The PostgreSQL session store's SQL building blocks (the row it reads, named statements) and the
// statements of who sees which session and of the per-creator quota (see postgres-session-store.ts).
import yesql from "yesql";
import { LIVE_SQL } from "./session-sql.js";

/** The database's time in epoch milliseconds: the one clock every replica's leases are measured by. */
export const DB_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

export const COLUMNS = `id, state, version, goal, task, budget, usage, context, pending, scopes, policy, stop_reason, answer,
  created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, history_len, created_by, request_hash`;
/** context.history gathered from its rows; `s` is the sessions row. */
export const HISTORY = `CASE WHEN s.history_len IS NULL THEN NULL ELSE
  (SELECT jsonb_agg(h.item ORDER BY h.seq) FROM session_history h WHERE h.session_id = s.id) END`;
/**
 * A claim or wake that takes a lease another replica held and let run out counts a takeover in
 * the session's usage (Usage.takeovers), in the same UPDATE; taking back its own lease does not.
 */
export const TAKEOVER = `usage = CASE WHEN s.lease_owner IS NOT NULL AND s.lease_owner <> :owner
    THEN jsonb_set(s.usage, '{takeovers}', to_jsonb(coalesce((s.usage->>'takeovers')::int, 0) + 1)) ELSE s.usage END`;
export const SESSION = `SELECT ${COLUMNS}, ${HISTORY} AS history FROM sessions s`;

/**
 * A move's usage: the patch's, its tokens, price, tool calls and retries added to the stored ones
 * (see MoveParams.tokensAdded); the patch's retries as they are while the stored usage has none.
 */
export const MOVE_USAGE = `CASE WHEN :setUsage::int = 0 THEN s.usage WHEN :tokensAdded::numeric IS NULL THEN :usage::jsonb
    ELSE :usage::jsonb || jsonb_build_object('tokens', (s.usage->>'tokens')::numeric + :tokensAdded::numeric,
      'costMicros', (s.usage->>'costMicros')::numeric + :costAdded::numeric,
      'toolCalls', (s.usage->>'toolCalls')::numeric + :toolCallsAdded::numeric)
    || CASE WHEN s.usage->>'retries' IS NULL THEN '{}'::jsonb
      ELSE jsonb_build_object('retries', (s.usage->>'retries')::numeric + :retriesAdded::numeric) END END`;

/** What a charge adds to a figure: `live` to a live session, `spent` to one that ended (see SessionStore.charge). */
const charged = (spent: string, live: string): string =>
  `CASE WHEN s.stop_reason IS NULL THEN :${live}::numeric ELSE :${spent}::numeric END`;

/** A charge, in one statement: retries only when it has any, so a usage with none keeps none. */
export const CHARGE_SQL = `UPDATE sessions s SET usage = s.usage || jsonb_build_object(
    'tokens', (s.usage->>'tokens')::numeric + ${charged("tokens", "liveTokens")},
    'costMicros', (s.usage->>'costMicros')::numeric + ${charged("costMicros", "liveCostMicros")},
    'toolCalls', (s.usage->>'toolCalls')::numeric + ${charged("toolCalls", "liveToolCalls")})
  || CASE WHEN ${charged("retries", "liveRetries")} = 0 THEN '{}'::jsonb
    ELSE jsonb_build_object('retries', coalesce((s.usage->>'retries')::numeric, 0) + ${charged("retries", "liveRetries")}) END
  WHERE id = :id RETURNING s.stop_reason IS NOT NULL AS ended`;

export interface Statement {
  readonly name: string;
  readonly text: string;
  /** The named parameters, in the order of the $n placeholders yesql put in their place. */
  readonly names: readonly string[];
}

/** A named prepared statement with `:name` parameters; yesql turns them into $n once, here. */
export function statement(name: string, sql: string): Statement {
  const { text, values } = yesql.pg<Record<string, string>>(sql)(
    new Proxy({}, { has: () => true, get: (_, key) => String(key) }),
  );
  return { name, text, names: values };
}

const KEYSET = "(created_at, id) > (:afterAt, :afterId)";
/** Other creators' sessions waiting for an approval. */
const OTHERS_WAITING = "state = 'AWAITING_APPROVAL' AND created_by <> :createdBy";
const page = (where: string): string => `${SESSION} ${where} ORDER BY created_at, id LIMIT :limit`;
/** A reader's own sessions and every waiting one: each branch takes at most a page along its own index. */
const ownOrWaiting = (keyset: string): string =>
  `(${page(`WHERE created_by = :createdBy${keyset}`)}) UNION ALL (${page(`WHERE ${OTHERS_WAITING}${keyset}`)}) ORDER BY created_at, id LIMIT :limit`;
const OWN_COUNTS = "SELECT state, count(*) AS n FROM sessions WHERE created_by = :createdBy GROUP BY state";

/** Pages of a reader's sessions (see Visibility), along sessions_by_creator. */
export const OWN_PAGES = {
  own: statement("lg_list_own", page("WHERE created_by = :createdBy")),
  ownAfter: statement("lg_list_own_after", page(`WHERE created_by = :createdBy AND ${KEYSET}`)),
  ownState: statement("lg_list_own_state", page("WHERE created_by = :createdBy AND state = :state")),
  ownStateAfter: statement(
    "lg_list_own_state_after",
    page(`WHERE created_by = :createdBy AND state = :state AND ${KEYSET}`),
  ),
  ownOrWaiting: statement("lg_list_own_or_waiting", ownOrWaiting("")),
  ownOrWaitingAfter: statement("lg_list_own_or_waiting_after", ownOrWaiting(` AND ${KEYSET}`)),
} as const;

/** Sessions by state, per visibility. */
export const VISIBLE_COUNTS = {
  all: statement("lg_count_by_state", "SELECT state, count(*) AS n FROM sessions GROUP BY state"),
  own: statement("lg_count_own", OWN_COUNTS),
  ownOrWaiting: statement(
    "lg_count_own_or_waiting",
    `${OWN_COUNTS} UNION ALL SELECT state, count(*) AS n FROM sessions WHERE ${OTHERS_WAITING} GROUP BY state`,
  ),
} as const;

/** The advisory lock class of one creator's creates (the two-key form, like the migrations' own); the key is hashtext(creator). */
const CREATOR_LOCK_CLASS = 0x4c4743;

export const CREATOR_QUOTA = {
  lock: statement("lg_creator_lock", `SELECT pg_advisory_xact_lock(${CREATOR_LOCK_CLASS}, hashtext(:createdBy))`),
  // The count along sessions_by_creator_live, and whether the start retries one that made a session.
  inFlight: statement(
    "lg_in_flight",
    `SELECT (SELECT count(*) FROM sessions WHERE created_by = :createdBy AND ${LIVE_SQL}) AS n,
      EXISTS (SELECT 1 FROM sessions WHERE created_by = :createdBy AND idempotency_key = :idempotencyKey) AS retried`,
  ),
} as const;
