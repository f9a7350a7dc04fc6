// Effect reservations on PostgreSQL (see effect-reservations.ts): the statements, and a change
// made inside the transaction of the move it rides on.
import type pg from "pg";
import {
  decideReservation,
  type MoneyChange,
  othersOf,
  RESERVATION_SQL,
  type ReservationRow,
  reservationParams,
  type ReservationStatus,
  reservedTotals,
  totalsDelta,
} from "./effect-reservations.js";
import { type Statement, statement } from "./postgres-session-sql.js";

const Q = {
  status: statement("lg_reservation_status", `${RESERVATION_SQL.status} FOR UPDATE`),
  others: statement("lg_other_effects", RESERVATION_SQL.others),
  reserve: statement("lg_reserve", RESERVATION_SQL.upsert),
  settle: statement("lg_settle", RESERVATION_SQL.settle),
  ofSession: statement("lg_reservations", RESERVATION_SQL.ofSession),
  byKey: statement("lg_reservation_by_key", RESERVATION_SQL.byKey),
  addTotals: statement("lg_add_totals", RESERVATION_SQL.addTotals),
  /** Serialises the reserves of one entity, or of one customer in one currency, across replicas, until the transaction ends. */
  lockTotal: statement("lg_lock_total", "SELECT pg_advisory_xact_lock(hashtextextended(:name, 0))"),
} as const;

/** The store's way of running a named statement, on a transaction's client or the pool. */
export type RunStatement = <R extends pg.QueryResultRow>(
  s: Statement,
  params: object,
  client?: pg.ClientBase | pg.Pool,
) => Promise<R[]>;

type OthersRow = { entity_held: string; customer: string; session: string };

/**
 * A reserve first takes the advisory locks of its entity and of its customer's currency (always in
 * that order), so concurrent reserves on either, from any replica, sum totals that include each other.
 */
export async function changeMoney(
  rows: RunStatement,
  client: pg.ClientBase,
  money: MoneyChange,
  now: number,
): Promise<void> {
  if ("settle" in money) {
    const [settled] = await rows<ReservationRow>(Q.settle, { key: money.settle, outcome: money.outcome, now }, client);
    if (settled) await rows(Q.addTotals, totalsDelta(settled, money.outcome), client);
    return;
  }
  const r = money.reserve;
  const params = reservationParams(r, money.limits.customerSince, now);
  await rows(Q.lockTotal, { name: `entity:${r.entity}:${r.entityId}` }, client);
  if (r.customerId !== "") await rows(Q.lockTotal, { name: `customer:${r.customerId}:${r.currency}` }, client);
  const existing = (await rows<{ status: ReservationStatus }>(Q.status, params, client))[0]?.status;
  const others = othersOf((await rows<OthersRow>(Q.others, params, client))[0]!);
  if (decideReservation(r, money.limits, existing, others) !== "insert") return;
  await rows(Q.reserve, params, client);
  await rows(Q.addTotals, reservedTotals(r, now), client);
}

export async function ownRowOf(rows: RunStatement, key: string): Promise<ReservationRow | undefined> {
  return (await rows<ReservationRow>(Q.byKey, { key }))[0];
}

export async function otherEffectsRow(rows: RunStatement, p: ReturnType<typeof reservationParams>): Promise<OthersRow> {
  return (await rows<OthersRow>(Q.others, p))[0]!;
}

export function reservationRowsOf(rows: RunStatement, sessionId: string): Promise<ReservationRow[]> {
  return rows<ReservationRow>(Q.ofSession, { sessionId });
}
