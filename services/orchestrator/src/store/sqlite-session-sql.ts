// The SQL text of the SQLite session store's larger statements.
import { OPEN_SQL } from "../migrations/sqlite/index.js";

/**
 * A move's usage: the patch's, its tokens, price, tool calls and retries added to the stored ones
 * (see MoveParams.tokensAdded); the patch's retries as they are while the stored usage has none.
 */
const USAGE_SQL = `CASE WHEN NOT @setUsage THEN usage WHEN @tokensAdded IS NULL THEN @usage
      ELSE json_set(CASE WHEN json_extract(usage, '$.retries') IS NULL THEN @usage
          ELSE json_set(@usage, '$.retries', json_extract(usage, '$.retries') + @retriesAdded) END,
        '$.tokens', json_extract(usage, '$.tokens') + @tokensAdded,
        '$.costMicros', json_extract(usage, '$.costMicros') + @costAdded,
        '$.toolCalls', json_extract(usage, '$.toolCalls') + @toolCallsAdded) END`;

/** What a charge adds to a figure: `live` to a live session, `spent` to one that ended (see SessionStore.charge). */
const charged = (spent: string, live: string): string =>
  `CASE WHEN stop_reason IS NULL THEN @${live} ELSE @${spent} END`;

/** A charge, in one statement: retries only when it has any, so a usage with none keeps none. */
export const CHARGE_SQL = `UPDATE sessions SET usage = json_set(
    CASE WHEN ${charged("retries", "liveRetries")} = 0 THEN usage ELSE
      json_set(usage, '$.retries', coalesce(json_extract(usage, '$.retries'), 0) + ${charged("retries", "liveRetries")}) END,
    '$.tokens', json_extract(usage, '$.tokens') + ${charged("tokens", "liveTokens")},
    '$.costMicros', json_extract(usage, '$.costMicros') + ${charged("costMicros", "liveCostMicros")},
    '$.toolCalls', json_extract(usage, '$.toolCalls') + ${charged("toolCalls", "liveToolCalls")})
  WHERE id = @id RETURNING stop_reason IS NOT NULL AS ended`;

/**
 * The optimistic-lock UPDATE of a transition's last move, with the patch. Only a move into a
 * terminal state sets stop_reason: SQLite maintains the partial indexes keyed on stop_reason only
 * when an UPDATE assigns it. A move into a terminal state or AWAITING_APPROVAL drops the lease.
 * No RETURNING clause: SQLite gathers RETURNING rows in a temporary b-tree built per execution;
 * what the caller needs back is read with leaseOf.
 */
export const moveSql = (into: "live" | "awaiting" | "terminal"): string => `UPDATE sessions SET
    state = @to,
    version = version + 1,
    usage = ${USAGE_SQL},
    context = CASE WHEN @setContext THEN @context ELSE context END,
    history_len = CASE WHEN @setContext THEN @historyLen ELSE history_len END,
    pending = CASE WHEN @setPending THEN @pending ELSE pending END,
    answer = CASE WHEN @setAnswer THEN @answer ELSE answer END,${
      into === "terminal"
        ? `
    stop_reason = @stopReason,`
        : ""
    }${
      into !== "live"
        ? `
    lease_owner = NULL,
    lease_expires_at = NULL,`
        : ""
    }
    updated_at = @at
  WHERE id = @id AND state = @from AND version = @expectedVersion
    AND (@owner IS NULL OR (lease_owner = @owner AND lease_expires_at > @now))`;

/**
 * A claim or wake that takes a lease another replica held and let run out counts a takeover in
 * the session's usage (Usage.takeovers), in the same UPDATE; taking back its own lease does not.
 */
export const TAKEOVER_SQL = `usage = CASE WHEN lease_owner IS NOT NULL AND lease_owner <> @owner
    THEN json_set(usage, '$.takeovers', coalesce(json_extract(usage, '$.takeovers'), 0) + 1) ELSE usage END`;

/** A session row with its history items gathered back into one JSON array. */
export const SESSION_COLUMNS = `s.*, CASE WHEN s.history_len IS NULL THEN NULL ELSE
  (SELECT json_group_array(json(h.item) ORDER BY h.seq) FROM session_history h WHERE h.session_id = s.id) END AS history`;

/** Sessions matching `where`, oldest first, a page at most. */
export const pageSql = (where: string): string =>
  `SELECT ${SESSION_COLUMNS} FROM sessions s ${where} ORDER BY created_at, id LIMIT @limit`;

/** After the previous page's last session (keyset pagination). */
export const KEYSET_SQL = "(created_at, id) > (@afterAt, @afterId)";

/** Other creators' sessions waiting for an approval, along the live sessions' partial index. */
const OTHERS_WAITING = `state = 'AWAITING_APPROVAL' AND ${OPEN_SQL} AND created_by <> @createdBy`;

/**
 * A page of a reader's own sessions and every waiting one: each branch takes at most a page along
 * its own index, so a page costs the same however many sessions either side has.
 */
export const ownOrWaitingPageSql = (keyset: string): string =>
  `SELECT * FROM (${pageSql(`WHERE created_by = @createdBy${keyset}`)}) UNION ALL SELECT * FROM (${pageSql(`WHERE ${OTHERS_WAITING}${keyset}`)}) ORDER BY created_at, id LIMIT @limit`;

const OWN_COUNTS = `SELECT state, count(*) AS n FROM sessions WHERE created_by = @createdBy GROUP BY state`;

/** Sessions by state, per visibility (live and ended ones apart, along their partial indexes). */
export const COUNT_SQL = {
  all: `SELECT state, count(*) AS n FROM sessions WHERE ${OPEN_SQL} GROUP BY state
    UNION ALL SELECT state, count(*) AS n FROM sessions WHERE stop_reason IS NOT NULL GROUP BY state`,
  own: OWN_COUNTS,
  ownOrWaiting: `${OWN_COUNTS} UNION ALL SELECT state, count(*) AS n FROM sessions WHERE ${OTHERS_WAITING} GROUP BY state`,
} as const;

/** A creator's sessions in flight (the quota's count), along sessions_by_creator_open. */
export const IN_FLIGHT_SQL = `SELECT count(*) AS n FROM sessions WHERE created_by = @createdBy AND ${OPEN_SQL}`;
