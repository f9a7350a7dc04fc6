// Money reserved before it moves. Before an irreversible money call goes out, its amount is held
// against three totals — the entity's (what its ledger says was moved, plus what is held on it),
// the customer's (held and made, per currency, over a window) and the session's (held and made,
// per currency) — in the same transaction as the move that records the call, so that every
// replica sees it and two sessions can never both pass a threshold only one of them may pass. A
// reservation becomes the ledger's figure ("settled") when the call succeeded, is "released" when
// it is known to have failed, and stays "held" while its outcome is unknown. Both stores read the
// reservation and the totals under their lock and write what `decideReservation` returns.

/** An irreversible effect's amount, held against its totals until its outcome is known. */
export interface Reservation {
  /** The effect's idempotency key: one reservation per effect, whatever the replica or the retry. */
  readonly key: string;
  readonly sessionId: string;
  readonly tool: string;
  readonly entity: string;
  readonly entityId: string;
  /** The customer the entity belongs to; "" when it names none (the customer total is then not kept). */
  readonly customerId: string;
  /** ISO 4217 code; no total ever adds two currencies. */
  readonly currency: string;
  /** Minor units of `currency`. */
  readonly amount: number;
}

export type ReservationStatus = "held" | "settled" | "released";

export interface ReservationRecord extends Reservation {
  readonly status: ReservationStatus;
  readonly createdAt: number;
}

/** The most each total may reach with the reservation in it; above any, nothing is written. */
export interface ReservationLimits {
  /** What the entity's ledger said was already moved (read live by the host). */
  readonly entityMoved: number;
  readonly entityMax: number;
  readonly customerMax: number;
  /** Start of the customer window, epoch milliseconds. */
  readonly customerSince: number;
  readonly sessionMax: number;
  /** The task's figure for the session's total, when the task states one. */
  readonly taskMax: number | undefined;
}

/** The totals with the reservation's amount in them. */
export interface EffectTotals {
  /** Moved on the entity (ledger) + held on it by other effects + this amount. */
  readonly entity: number;
  /** The customer's held and made amounts in this currency within the window + this amount. */
  readonly customer: number;
  /** The session's held and made amounts in this currency + this amount. */
  readonly session: number;
}

/** What other effects hold or made, as a store sums them (the reservation's own key left out). */
export interface OtherEffects {
  readonly entityHeld: number;
  readonly customer: number;
  readonly session: number;
}

export type LimitName = "entity" | "customer" | "session" | "task";

/** A change to the money held, made in the same transaction as the move it rides on. */
export type MoneyChange = { readonly reserve: Reservation; readonly limits: ReservationLimits } | { readonly settle: string; readonly outcome: Exclude<ReservationStatus, "held"> };

/** The reservation would take a total above its limit: nothing was written, the move included. */
export class ReservationRefusedError extends Error {
  override readonly name = "ReservationRefusedError";
  constructor(
    readonly key: string,
    readonly totals: EffectTotals,
    readonly exceeded: readonly LimitName[],
  ) {
    super(`reservation ${key} refused: ${exceeded.join(", ")} above the limit`);
  }
}

export function totalsOf(r: Reservation, entityMoved: number, others: OtherEffects): EffectTotals {
  return { entity: entityMoved + others.entityHeld + r.amount, customer: others.customer + r.amount, session: others.session + r.amount };
}

/** The limits a set of totals goes above. */
export function exceededLimits(totals: EffectTotals, limits: ReservationLimits): LimitName[] {
  const out: LimitName[] = [];
  if (totals.entity > limits.entityMax) out.push("entity");
  if (totals.customer > limits.customerMax) out.push("customer");
  if (totals.session > limits.sessionMax) out.push("session");
  if (limits.taskMax !== undefined && totals.session > limits.taskMax) out.push("task");
  return out;
}

/**
 * What a reserve does, decided from the key's earlier reservation and the other effects' totals,
 * both read under the store's lock: nothing (the effect is already held or made: a re-plan, a
 * re-send or a replay counts once), or insert it; throws ReservationRefusedError above a limit.
 */
export function decideReservation(r: Reservation, limits: ReservationLimits, existing: ReservationStatus | undefined, others: OtherEffects): "keep" | "insert" {
  if (existing === "held" || existing === "settled") return "keep";
  const totals = totalsOf(r, limits.entityMoved, others);
  const exceeded = exceededLimits(totals, limits);
  if (exceeded.length > 0) throw new ReservationRefusedError(r.key, totals, exceeded);
  return "insert";
}

/** A reservation row as both databases store it. */
export interface ReservationRow {
  key: string;
  session_id: string;
  tool: string;
  entity: string;
  entity_id: string;
  customer_id: string;
  currency: string;
  amount: number | string;
  status: ReservationStatus;
  created_at: number | string;
}

/** Named parameters of the statements below (the same `:name` spelling binds on both drivers). */
export function reservationParams(r: Reservation, since: number, now: number) {
  return { key: r.key, sessionId: r.sessionId, tool: r.tool, entity: r.entity, entityId: r.entityId, customerId: r.customerId, currency: r.currency, amount: r.amount, since, now };
}

export const RESERVATION_SQL = {
  status: "SELECT status FROM effect_reservations WHERE key = :key",
  /** What other effects hold or made; three index lookups. */
  others: `SELECT
      (SELECT coalesce(sum(amount), 0) FROM effect_reservations
        WHERE entity = :entity AND entity_id = :entityId AND status = 'held' AND key <> :key) AS entity_held,
      (SELECT coalesce(sum(amount), 0) FROM effect_reservations
        WHERE customer_id = :customerId AND customer_id <> '' AND currency = :currency AND status <> 'released' AND created_at >= :since AND key <> :key) AS customer,
      (SELECT coalesce(sum(amount), 0) FROM effect_reservations
        WHERE session_id = :sessionId AND currency = :currency AND status <> 'released' AND key <> :key) AS session`,
  /** Insert, or turn a released reservation of the same key back into a held one. */
  upsert: `INSERT INTO effect_reservations (key, session_id, tool, entity, entity_id, customer_id, currency, amount, status, created_at, settled_at)
    VALUES (:key, :sessionId, :tool, :entity, :entityId, :customerId, :currency, :amount, 'held', :now, NULL)
    ON CONFLICT (key) DO UPDATE SET amount = excluded.amount, status = 'held', created_at = excluded.created_at, settled_at = NULL`,
  settle: "UPDATE effect_reservations SET status = :outcome, settled_at = :now WHERE key = :key AND status = 'held'",
  ofSession: "SELECT * FROM effect_reservations WHERE session_id = :sessionId ORDER BY created_at, key",
} as const;

export function othersOf(row: { entity_held: number | string; customer: number | string; session: number | string }): OtherEffects {
  return { entityHeld: Number(row.entity_held), customer: Number(row.customer), session: Number(row.session) };
}

export function toReservationRecord(r: ReservationRow): ReservationRecord {
  return {
    key: r.key,
    sessionId: r.session_id,
    tool: r.tool,
    entity: r.entity,
    entityId: r.entity_id,
    customerId: r.customer_id,
    currency: r.currency,
    amount: Number(r.amount),
    status: r.status,
    createdAt: Number(r.created_at),
  };
}
