// The SQL text of the SQLite session store's two largest statements.

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
    usage = CASE WHEN @setUsage THEN @usage ELSE usage END,
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

/** A session row with its history items gathered back into one JSON array. */
export const SESSION_COLUMNS = `s.*, CASE WHEN s.history_len IS NULL THEN NULL ELSE
  (SELECT json_group_array(json(h.item) ORDER BY h.seq) FROM session_history h WHERE h.session_id = s.id) END AS history`;
