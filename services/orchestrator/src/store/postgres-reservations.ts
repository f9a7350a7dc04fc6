// Effect reservations on PostgreSQL (see effect-reservations.ts): the statements, and a change
// made inside the transaction of the move it rides on.
import type pg from "pg";
import * as reservations from "./effect-reservations.js";
import { RESERVATION_SQL } from "./reservation-sql.js";
import { type Statement, statement } from "./postgres-session-sql.js";

const Q = {
  status: statement("lg_reservation_status", `${RESERVATION_SQL.status} FOR UPDATE`),
  others: statement("lg_other_effects", RESERVATION_SQL.others),
  reserve: statement("lg_reserve", RESERVATION_SQL.upsert),
  settle: statement("lg_settle", RESERVATION_SQL.settle),
  settleByHand: statement("lg_settle_by_hand", RESERVATION_SQL.settleByHand),
  ofSession: statement("lg_reservations", RESERVATION_SQL.ofSession),
  byKey: statement("lg_reservation_by_key", RESERVATION_SQL.byKey),
  addTotals: statement("lg_add_totals", RESERVATION_SQL.addTotals),
} as const;

/** Serialises the reserves of one entity, or of one customer in one currency, across replicas, until the transaction ends. */
export const RESERVE_LOCK = statement("lg_lock_total", "SELECT pg_advisory_xact_lock(hashtextextended(:name, 0))");

/** The store's way of running a named statement, on a transaction's client or the pool. */
export type RunStatement = <R extends pg.QueryResultRow>(
  s: Statement,
  params: object,
  client?: pg.ClientBase | pg.Pool,
) => Promise<R[]>;

/**
 * The advisory locks a change takes, in the order it takes them: a reserve's entity, then its customer's currency.
 * The store takes a replica's turn on each in the same order (Turns.takeEach) before it takes a pooled connection.
 */
export function lockNamesOf(money: reservations.MoneyChange | undefined): string[] {
  if (money === undefined || "settle" in money) return [];
  const r = money.reserve;
  const entity = `entity:${r.entity}:${r.entityId}`;
  return r.customerId === "" ? [entity] : [entity, `customer:${r.customerId}:${r.currency}`];
}

/**
 * A reserve first takes the advisory locks of its entity and of its customer's currency (always in
 * that order), so concurrent reserves on either, from any replica, sum totals that include each other.
 */
export async function changeMoney(
  rows: RunStatement,
  client: pg.ClientBase,
  money: reservations.MoneyChange,
  now: number,
): Promise<void> {
  if ("settle" in money) {
    const [settled] = await rows<reservations.ReservationRow>(
      Q.settle,
      { key: money.settle, outcome: money.outcome, now },
      client,
    );
    if (settled) await rows(Q.addTotals, reservations.totalsDelta(settled, money.outcome), client);
    return;
  }
  const r = money.reserve;
  const params = reservations.reservationParams(r, money.limits.customerSince, now);
  for (const name of lockNamesOf(money)) await rows(RESERVE_LOCK, { name }, client);
  const existing = (await rows<{ status: reservations.ReservationStatus }>(Q.status, params, client))[0]?.status;
  const others = reservations.othersOf((await rows<reservations.OthersRow>(Q.others, params, client))[0]!);
  if (reservations.decideReservation(r, money.limits, existing, others) !== "insert") return;
  await rows(Q.reserve, params, client);
  await rows(Q.addTotals, reservations.reservedTotals(r, now), client);
}

/** In a transaction on `client`: the reservation settled, with the totals; undefined (nothing written) unless it was held. */
export async function settleHeld(
  rows: RunStatement,
  client: pg.ClientBase,
  p: ReturnType<typeof reservations.handSettleParams>,
): Promise<reservations.ReservationRow | undefined> {
  const [settled] = await rows<reservations.ReservationRow>(Q.settleByHand, p, client);
  if (settled) await rows(Q.addTotals, reservations.totalsDelta(settled, p.outcome), client);
  return settled;
}

export async function ownRowOf(rows: RunStatement, key: string): Promise<reservations.ReservationRow | undefined> {
  return (await rows<reservations.ReservationRow>(Q.byKey, { key }))[0];
}

export async function otherEffectsRow(
  rows: RunStatement,
  p: ReturnType<typeof reservations.reservationParams>,
): Promise<reservations.OthersRow> {
  return (await rows<reservations.OthersRow>(Q.others, p))[0]!;
}

export function reservationRowsOf(rows: RunStatement, sessionId: string): Promise<reservations.ReservationRow[]> {
  return rows<reservations.ReservationRow>(Q.ofSession, { sessionId });
}
