// The statements of effect reservations (effect-reservations.ts), shared by both databases: named
// parameters that better-sqlite3 takes as they are and postgres-session-sql.ts (yesql) turns into $n.

/**
 * Each total is kept as running sums (effect_totals) beside the reservations, so a check reads a
 * few rows however many effects an entity or a customer had: the entity's and the session's one
 * row each, the customer's one row per hour of the window.
 */
export const RESERVATION_SQL = {
  status: "SELECT status FROM effect_reservations WHERE key = :key",
  byKey: "SELECT * FROM effect_reservations WHERE key = :key",
  /** What other effects hold or made (the reserve's own key is never in them when it checks). */
  others: `SELECT
      coalesce((SELECT held FROM effect_totals WHERE scope = 'entity' AND id = :entityKey AND currency = '' AND bucket = 0), 0) AS entity_held,
      coalesce((SELECT sum(held + made) FROM effect_totals
        WHERE scope = 'customer' AND id = :customerId AND id <> '' AND currency = :currency AND bucket >= :sinceBucket), 0) AS customer,
      coalesce((SELECT held + made FROM effect_totals WHERE scope = 'session' AND id = :sessionId AND currency = :currency AND bucket = 0), 0) AS session,
      coalesce((SELECT sum(held + made) FROM effect_totals WHERE scope = 'session' AND id = :sessionId AND bucket = 0), 0) AS session_any`,
  /** Insert, or turn a released reservation of the same key back into a held one. */
  upsert: `INSERT INTO effect_reservations (key, session_id, tool, entity, entity_id, customer_id, currency, amount, status, created_at, settled_at)
    VALUES (:key, :sessionId, :tool, :entity, :entityId, :customerId, :currency, :amount, 'held', :now, NULL)
    ON CONFLICT (key) DO UPDATE SET amount = excluded.amount, status = 'held', created_at = excluded.created_at, settled_at = NULL`,
  settle:
    "UPDATE effect_reservations SET status = :outcome, settled_at = :now WHERE key = :key AND status = 'held' RETURNING *",
  /** A HandSettlement: only a reservation still held, of that session, so a second one writes nothing. */
  settleByHand: `UPDATE effect_reservations SET status = :outcome, settled_at = :now, settled_by = :by, settle_note = :note
    WHERE key = :key AND session_id = :sessionId AND status = 'held' RETURNING *`,
  /** Adds a totalsDelta to the running sums. */
  addTotals: `INSERT INTO effect_totals (scope, id, currency, bucket, held, made) VALUES
      ('entity', :entityKey, '', 0, :held, 0),
      ('customer', :customerId, :currency, :bucket, :held, :made),
      ('session', :sessionId, :currency, 0, :held, :made)
    ON CONFLICT (scope, id, currency, bucket) DO UPDATE SET held = effect_totals.held + excluded.held, made = effect_totals.made + excluded.made`,
  ofSession: "SELECT * FROM effect_reservations WHERE session_id = :sessionId ORDER BY created_at, key",
} as const;
