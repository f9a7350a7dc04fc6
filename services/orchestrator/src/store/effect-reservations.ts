// Money reserved before it moves. Before an irreversible money call goes out, its amount is held
// against three totals — the entity's (what its ledger says was moved, plus what is held on it),
// the customer's (held and made, per currency, over a window) and the session's (held and made,
// per currency) — in the same transaction as the move that records the call, so that every
// replica sees it and two sessions can never both pass a threshold only one of them may pass. A
// reservation becomes the ledger's figure ("settled") when the call succeeded, is "released" when
// it is known to have failed, and stays "held" while its outcome is unknown. Both stores read the
// reservation and the totals under their lock and write what `decideReservation` returns, with the
// totals' running sums (effect_totals) changed in the same transaction.

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
  /** Set when a person settled it by hand (HandSettlement): who, and what they found. */
  readonly settledBy?: string;
  readonly settleNote?: string;
}

/**
 * A person's word on a held reservation whose session never learnt the outcome (`pnpm
 * settle-effect`): `made` counts it as spent, else it is released; who and why are kept on it.
 */
export interface HandSettlement {
  readonly sessionId: string;
  readonly key: string;
  readonly made: boolean;
  readonly by: string;
  readonly note: string;
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
  /**
   * The session's held and made amounts in every currency + this amount: what the task's figure
   * bounds. A task's amount_cents names no currency, so refunds in two currencies both count
   * against it, or one figure would let its amount through once per currency.
   */
  readonly task: number;
}

/** What other effects hold or made, as a store sums them (the reservation's own key left out). */
export interface OtherEffects {
  readonly entityHeld: number;
  readonly customer: number;
  readonly session: number;
  /** The session's, in every currency. */
  readonly sessionAnyCurrency: number;
}

export type LimitName = "entity" | "customer" | "session" | "task";

/** A change to the money held, made in the same transaction as the move it rides on. */
export type MoneyChange =
  | { readonly reserve: Reservation; readonly limits: ReservationLimits }
  | { readonly settle: string; readonly outcome: Exclude<ReservationStatus, "held"> };

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
  return {
    entity: entityMoved + others.entityHeld + r.amount,
    customer: others.customer + r.amount,
    session: others.session + r.amount,
    task: others.sessionAnyCurrency + r.amount,
  };
}

/** The limits a set of totals goes above. */
export function exceededLimits(totals: EffectTotals, limits: ReservationLimits): LimitName[] {
  const out: LimitName[] = [];
  if (totals.entity > limits.entityMax) out.push("entity");
  if (totals.customer > limits.customerMax) out.push("customer");
  if (totals.session > limits.sessionMax) out.push("session");
  if (limits.taskMax !== undefined && totals.task > limits.taskMax) out.push("task");
  return out;
}

/**
 * What a reserve does, decided from the key's earlier reservation and the other effects' totals,
 * both read under the store's lock: nothing (the effect is already held or made: a re-plan, a
 * re-send or a replay counts once), or insert it; throws ReservationRefusedError above a limit.
 */
export function decideReservation(
  r: Reservation,
  limits: ReservationLimits,
  existing: ReservationStatus | undefined,
  others: OtherEffects,
): "keep" | "insert" {
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
  settled_by?: string | null;
  settle_note?: string | null;
}

/** The customer window is counted in whole hours: a reservation's amount lands in the hour it was made. */
export const CUSTOMER_BUCKET_MS = 3_600_000;

const bucketOf = (at: number): number => Math.floor(at / CUSTOMER_BUCKET_MS);

/** Named parameters of the statements below (the same `:name` spelling binds on both drivers). */
export function reservationParams(r: Reservation, since: number, now: number) {
  return {
    key: r.key,
    sessionId: r.sessionId,
    tool: r.tool,
    entity: r.entity,
    entityId: r.entityId,
    entityKey: `${r.entity}:${r.entityId}`,
    customerId: r.customerId,
    currency: r.currency,
    amount: r.amount,
    sinceBucket: bucketOf(since),
    now,
  };
}

/**
 * How a reserve (+amount held) or a settle (held → made, or let go) changes the running totals:
 * the entity's held amount, the customer's held and made amounts in the hour of the reservation,
 * the session's held and made amounts.
 */
export function totalsDelta(
  r: Pick<ReservationRow, "session_id" | "entity" | "entity_id" | "customer_id" | "currency" | "amount" | "created_at">,
  change: "reserve" | ReservationStatus,
) {
  const amount = Number(r.amount);
  const held = change === "reserve" ? amount : -amount;
  return {
    entityKey: `${r.entity}:${r.entity_id}`,
    sessionId: r.session_id,
    customerId: r.customer_id,
    currency: r.currency,
    bucket: bucketOf(Number(r.created_at)),
    held,
    made: change === "settled" ? amount : 0,
  };
}

/** The totals a new reservation adds, as of `now`. */
export function reservedTotals(r: Reservation, now: number) {
  const row = {
    session_id: r.sessionId,
    entity: r.entity,
    entity_id: r.entityId,
    customer_id: r.customerId,
    currency: r.currency,
    amount: r.amount,
    created_at: now,
  };
  return totalsDelta(row, "reserve");
}

/**
 * What other effects than `r` hold or made, from the running sums: `r`'s own reservation, when it
 * is already counted there (a re-plan after a crash), is taken out again.
 */
export function othersBesides(
  r: Reservation,
  sinceBucket: number,
  sums: OtherEffects,
  own: ReservationRow | undefined,
): OtherEffects {
  if (!own || own.status === "released") return sums;
  const amount = Number(own.amount);
  const sameCurrency = own.currency === r.currency;
  return {
    entityHeld: sums.entityHeld - (own.status === "held" ? amount : 0),
    customer:
      sums.customer -
      (sameCurrency && own.customer_id === r.customerId && bucketOf(Number(own.created_at)) >= sinceBucket
        ? amount
        : 0),
    session: sums.session - (sameCurrency ? amount : 0),
    sessionAnyCurrency: sums.sessionAnyCurrency - amount,
  };
}

/** The others query's row, as each driver returns it (PostgreSQL's sums as strings). */
export interface OthersRow {
  entity_held: number | string;
  customer: number | string;
  session: number | string;
  session_any: number | string;
}

export function othersOf(row: OthersRow): OtherEffects {
  return {
    entityHeld: Number(row.entity_held),
    customer: Number(row.customer),
    session: Number(row.session),
    sessionAnyCurrency: Number(row.session_any),
  };
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
    ...(r.settled_by ? { settledBy: r.settled_by, settleNote: r.settle_note ?? "" } : {}),
  };
}

/** A HandSettlement's statement parameters. */
export function handSettleParams(s: HandSettlement, now: number) {
  const outcome: Exclude<ReservationStatus, "held"> = s.made ? "settled" : "released";
  return { key: s.key, sessionId: s.sessionId, outcome, by: s.by, note: s.note, now };
}
