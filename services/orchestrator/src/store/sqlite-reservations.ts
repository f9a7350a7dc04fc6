// Effect reservations on SQLite (see effect-reservations.ts): the statements, and a change made
// inside the write of the move it rides on, under the write lock every SQLite write holds (BEGIN
// IMMEDIATE), so the totals read are the ones the row is written against.
import type Database from "better-sqlite3";
import * as reservations from "./effect-reservations.js";
import { RESERVATION_SQL } from "./reservation-sql.js";

type Params = ReturnType<typeof reservations.reservationParams>;

export class SqliteReservations {
  private readonly status: Database.Statement<[Params], { status: reservations.ReservationStatus }>;
  private readonly others: Database.Statement<[Params], reservations.OthersRow>;
  private readonly upsert: Database.Statement<[Params]>;
  private readonly settle: Database.Statement<
    [{ key: string; outcome: string; now: number }],
    reservations.ReservationRow
  >;
  private readonly settleByHand: Database.Statement<
    [ReturnType<typeof reservations.handSettleParams>],
    reservations.ReservationRow
  >;
  private readonly addTotals: Database.Statement<[ReturnType<typeof reservations.totalsDelta>]>;
  private readonly byKey: Database.Statement<[{ key: string }], reservations.ReservationRow>;
  private readonly ofSession: Database.Statement<[{ sessionId: string }], reservations.ReservationRow>;

  constructor(db: Database.Database) {
    this.status = db.prepare(RESERVATION_SQL.status);
    this.others = db.prepare(RESERVATION_SQL.others);
    this.upsert = db.prepare(RESERVATION_SQL.upsert);
    this.settle = db.prepare(RESERVATION_SQL.settle);
    this.settleByHand = db.prepare(RESERVATION_SQL.settleByHand);
    this.ofSession = db.prepare(RESERVATION_SQL.ofSession);
    this.addTotals = db.prepare(RESERVATION_SQL.addTotals);
    this.byKey = db.prepare(RESERVATION_SQL.byKey);
  }

  /** Inside a write's transaction: throws ReservationRefusedError (the write then rolls back) above a limit. */
  change(money: reservations.MoneyChange, now: number): void {
    if ("settle" in money) {
      const settled = this.settle.get({ key: money.settle, outcome: money.outcome, now });
      if (settled) this.addTotals.run(reservations.totalsDelta(settled, money.outcome));
      return;
    }
    const r = money.reserve;
    const params = reservations.reservationParams(r, money.limits.customerSince, now);
    const existing = this.status.get(params)?.status;
    const others = reservations.othersOf(this.others.get(params)!);
    if (reservations.decideReservation(r, money.limits, existing, others) !== "insert") return;
    this.upsert.run(params);
    this.addTotals.run(reservations.reservedTotals(r, now));
  }

  /** Inside a write's transaction: the reservation settled, with the totals; undefined (nothing written) unless it was held. */
  settleHeld(p: ReturnType<typeof reservations.handSettleParams>): reservations.ReservationRow | undefined {
    const settled = this.settleByHand.get(p);
    if (settled) this.addTotals.run(reservations.totalsDelta(settled, p.outcome));
    return settled;
  }

  ownRow(key: string): reservations.ReservationRow | undefined {
    return this.byKey.get({ key });
  }

  othersRow(p: Params) {
    return this.others.get(p)!;
  }

  rowsOf(sessionId: string): reservations.ReservationRow[] {
    return this.ofSession.all({ sessionId });
  }
}
