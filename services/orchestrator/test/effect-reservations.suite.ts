// Money held before it moves, as every SessionStore must keep it (run by session-store.suite.ts on
// each backend): a reserve rides on the move that records the call and is refused, with nothing
// written, above its limits; concurrent reserves from several store instances (replicas) never
// both pass a limit only one may pass; totals never add currencies or look past the window; a hold
// settled by hand (`pnpm settle-effect`) counts once, whoever settles it first.
import { expect, it } from "vitest";
import {
  CUSTOMER_BUCKET_MS,
  type MoneyChange,
  type Reservation,
  ReservationRefusedError,
  type ReservationLimits,
} from "../src/store/effect-reservations.js";
import type { NewSession, SessionRecord, SessionStore } from "../src/store/session-store.js";
import { movesAt } from "./store-move.js";

export interface MoneyContext {
  store(): SessionStore;
  another(): Promise<SessionStore>;
  now(): number;
  newSession(id: string, extra?: Partial<NewSession>): NewSession;
}

/** The limits most reserves here are made under: 50,000 per entity, 200,000 per customer. */
export const LIMITS: ReservationLimits = {
  entityMoved: 0,
  entityMax: 50_000,
  customerMax: 200_000,
  customerSince: 0,
  sessionMax: 50_000,
  taskMax: undefined,
};

/** A refund reserve of 450.00 on ord_A for cust_1, unless `extra` says otherwise. */
export function reservation(sessionId: string, extra: Partial<Reservation> = {}): Reservation {
  return {
    key: `lg-${sessionId}-refund`,
    sessionId,
    tool: "billing_refund",
    entity: "order",
    entityId: "ord_A",
    customerId: "cust_1",
    currency: "USD",
    amount: 45_000,
    ...extra,
  };
}

export function effectReservationTests(t: MoneyContext): void {
  const move = movesAt(() => t.now());
  /** A new session moved to THINKING, ready to record a call. */
  async function thinking(store: SessionStore, id: string): Promise<SessionRecord> {
    await store.create(t.newSession(id));
    return move(store, id, "IDLE", "THINKING", 0);
  }
  const call = (store: SessionStore, s: SessionRecord, money: MoneyChange) =>
    move(store, s.id, s.state, "TOOL_EXECUTING", s.version, { audit: { at: t.now(), reason: "calling" }, money });
  const observe = (store: SessionStore, s: SessionRecord, money: MoneyChange) =>
    move(store, s.id, "TOOL_EXECUTING", "OBSERVING", s.version, { money });

  it("holds a reservation with the move that records the call, then settles or releases it with the move that observes the outcome", async () => {
    const store = t.store();
    const s1 = await thinking(store, "s1");
    const r1 = reservation("s1");
    const executing = await call(store, s1, { reserve: r1, limits: LIMITS });
    expect(await store.reservations("s1")).toEqual([{ ...r1, status: "held", createdAt: expect.any(Number) }]);
    expect(await store.otherEffects(reservation("s2", { key: "other" }), 0)).toEqual({
      entityHeld: 45_000,
      customer: 45_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
    await observe(store, executing, { settle: r1.key, outcome: "settled" });
    expect((await store.reservations("s1"))[0]?.status).toBe("settled");
    // Made: no longer held on the entity (its ledger now says it), still counted for the customer and the session.
    expect(await store.otherEffects(reservation("s1", { key: "other" }), 0)).toEqual({
      entityHeld: 0,
      customer: 45_000,
      session: 45_000,
      sessionAnyCurrency: 45_000,
    });

    const s2 = await thinking(store, "s2");
    const r2 = reservation("s2", { amount: 1_000 });
    const executing2 = await call(store, s2, { reserve: r2, limits: { ...LIMITS, entityMoved: 45_000 } });
    await observe(store, executing2, { settle: r2.key, outcome: "released" });
    expect(await store.otherEffects(reservation("s3", { key: "other" }), 0)).toEqual({
      entityHeld: 0,
      customer: 45_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
  });

  it("refuses a reserve above a limit, naming the totals, and writes neither the reservation nor the move", async () => {
    const store = t.store();
    const s1 = await thinking(store, "s1");
    await call(store, s1, { reserve: reservation("s1"), limits: LIMITS });
    const s2 = await thinking(store, "s2");
    const refused = await call(store, s2, { reserve: reservation("s2"), limits: LIMITS }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ReservationRefusedError);
    expect(refused).toMatchObject({
      totals: { entity: 90_000, customer: 90_000, session: 45_000 },
      exceeded: ["entity"],
    });
    expect(await store.get("s2")).toMatchObject({ state: "THINKING", version: s2.version });
    expect(await store.auditTrail("s2")).toHaveLength(1);
    expect(await store.reservations("s2")).toEqual([]);
  });

  it("counts an effect once: a second reserve of a held or made key passes whatever the totals, a released one is checked again", async () => {
    const store = t.store();
    const s1 = await thinking(store, "s1");
    const r1 = reservation("s1");
    const executing = await call(store, s1, { reserve: r1, limits: LIMITS });
    const observed = await observe(store, executing, { settle: r1.key, outcome: "released" });
    const again = await move(store, "s1", "OBSERVING", "THINKING", observed.version);
    const tight = { ...LIMITS, entityMax: 10_000 };
    await expect(call(store, again, { reserve: r1, limits: tight })).rejects.toBeInstanceOf(ReservationRefusedError);
    const held = await call(store, again, { reserve: r1, limits: LIMITS });
    // Re-planned after a crash, re-sent after a lost answer: the same key held again counts once, whatever the totals now.
    const replanned = await move(store, "s1", "TOOL_EXECUTING", "RETRYING", held.version);
    await move(store, "s1", "RETRYING", "TOOL_EXECUTING", replanned.version, { money: { reserve: r1, limits: tight } });
    expect(await store.reservations("s1")).toEqual([
      expect.objectContaining({ key: r1.key, status: "held", amount: 45_000 }),
    ]);
    expect(await store.otherEffects(reservation("s2", { key: "other" }), 0)).toMatchObject({ entityHeld: 45_000 });
    // The effect itself, planned again, is not among the others: it is not counted twice.
    expect(await store.otherEffects(r1, 0)).toEqual({ entityHeld: 0, customer: 0, session: 0, sessionAnyCurrency: 0 });
  });

  it("keeps totals per currency and per customer window, and the customer's across entities and sessions", async () => {
    const store = t.store();
    const since = t.now() - 1000;
    for (const [id, extra] of [
      ["s1", { entityId: "ord_A", currency: "USD", amount: 100_000 }],
      ["s2", { entityId: "ord_B", currency: "USD", amount: 60_000 }],
      ["s3", { entityId: "ord_C", currency: "CNY", amount: 150_000 }],
    ] as const) {
      await call(store, await thinking(store, id), {
        reserve: reservation(id, extra),
        limits: { ...LIMITS, entityMax: 1e9, sessionMax: 1e9 },
      });
    }
    expect(await store.otherEffects(reservation("s4", { entityId: "ord_D" }), since)).toEqual({
      entityHeld: 0,
      customer: 160_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
    expect(await store.otherEffects(reservation("s4", { entityId: "ord_D", currency: "CNY" }), since)).toEqual({
      entityHeld: 0,
      customer: 150_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
    // The session's own total is per currency; what the task's figure bounds counts every currency.
    expect(await store.otherEffects(reservation("s3", { key: "other", entityId: "ord_D" }), since)).toMatchObject({
      session: 0,
      sessionAnyCurrency: 150_000,
    });
    // The window is counted in whole hours: an amount leaves it once the window starts after its hour.
    expect(await store.otherEffects(reservation("s4", { entityId: "ord_D" }), t.now() + CUSTOMER_BUCKET_MS)).toEqual({
      entityHeld: 0,
      customer: 0,
      session: 0,
      sessionAnyCurrency: 0,
    });
    const refused = await call(store, await thinking(store, "s4"), {
      reserve: reservation("s4", { entityId: "ord_D" }),
      limits: { ...LIMITS, customerSince: since },
    }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ totals: { customer: 205_000 }, exceeded: ["customer"] });
  });

  /** A session that ended (cancelled) with `r` held: its call sent, its outcome never learnt. */
  async function endedHolding(store: SessionStore, r: Reservation): Promise<void> {
    const executing = await call(store, await thinking(store, r.sessionId), { reserve: r, limits: LIMITS });
    await move(store, r.sessionId, "TOOL_EXECUTING", "CANCELLED", executing.version, {
      patch: { stopReason: "cancelled" },
    });
  }
  const byHand = (r: Reservation, made: boolean, by = "operator") => ({
    sessionId: r.sessionId,
    key: r.key,
    made,
    by,
    note: made ? "billing lists the refund" : "billing lists no refund",
  });

  it("settles a held reservation by hand: made counts it as spent, not made releases it, with who and why", async () => {
    const store = t.store();
    const r1 = reservation("s1");
    const r2 = reservation("s2", { entityId: "ord_B", amount: 1_000 });
    await endedHolding(store, r1);
    await endedHolding(store, r2);
    expect(await store.settleHeld(byHand(r1, true))).toEqual({
      ...r1,
      status: "settled",
      createdAt: expect.any(Number),
      settledBy: "operator",
      settleNote: "billing lists the refund",
    });
    expect(await store.settleHeld(byHand(r2, false))).toMatchObject({ status: "released", settledBy: "operator" });
    expect(await store.reservations("s2")).toEqual([
      expect.objectContaining({ status: "released", settleNote: "billing lists no refund" }),
    ]);
    // Made: off the entity's held amount (its ledger says it now), still the customer's and the session's; released: nowhere.
    expect(await store.otherEffects(reservation("s1", { key: "other" }), 0)).toEqual({
      entityHeld: 0,
      customer: 45_000,
      session: 45_000,
      sessionAnyCurrency: 45_000,
    });
    expect(await store.otherEffects(reservation("s2", { key: "other", entityId: "ord_B" }), 0)).toEqual({
      entityHeld: 0,
      customer: 45_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
  });

  it("settles a reservation by hand once: a second settle, another session's id or an unknown key writes nothing", async () => {
    const store = t.store();
    const r1 = reservation("s1");
    await endedHolding(store, r1);
    await endedHolding(store, reservation("s2", { entityId: "ord_B" }));
    expect(await store.settleHeld({ ...byHand(r1, true), sessionId: "s2" })).toBeUndefined();
    expect(await store.settleHeld({ ...byHand(r1, true), key: "no-such-key" })).toBeUndefined();
    expect(await store.settleHeld(byHand(r1, true, "first"))).toMatchObject({ status: "settled" });
    expect(await store.settleHeld(byHand(r1, false, "second"))).toBeUndefined();
    expect(await store.settleHeld(byHand(r1, true, "second"))).toBeUndefined();
    expect(await store.reservations("s1")).toEqual([
      expect.objectContaining({ status: "settled", settledBy: "first" }),
    ]);
    expect(await store.otherEffects(reservation("s3", { key: "other" }), 0)).toEqual({
      entityHeld: 0,
      customer: 90_000,
      session: 0,
      sessionAnyCurrency: 0,
    });
    expect(await store.otherEffects(reservation("s1", { key: "other" }), 0)).toMatchObject({ session: 45_000 });
  });

  it("lets exactly one of 8 concurrent hand settles of one reservation through, across four store instances (replicas)", async () => {
    const stores = [t.store(), ...(await Promise.all([t.another(), t.another(), t.another()]))];
    const r1 = reservation("s1");
    await endedHolding(stores[0]!, r1);
    const settled = await Promise.all(
      Array.from({ length: 8 }, (_, i) => stores[i % stores.length]!.settleHeld(byHand(r1, i % 2 === 0, `op${i}`))),
    );
    const winners = settled.filter((s) => s !== undefined);
    expect(winners).toHaveLength(1);
    const made = winners[0]!.status === "settled";
    expect(await t.store().otherEffects(reservation("s2", { key: "other" }), 0)).toEqual({
      entityHeld: 0,
      customer: made ? 45_000 : 0,
      session: 0,
      sessionAnyCurrency: 0,
    });
    expect(await t.store().otherEffects(reservation("s1", { key: "other" }), 0)).toMatchObject({
      session: made ? 45_000 : 0,
    });
  });

  it("lets exactly one of 16 concurrent reserves through a limit only one fits, across four store instances (replicas)", async () => {
    const stores = [t.store(), ...(await Promise.all([t.another(), t.another(), t.another()]))];
    const ids = Array.from({ length: 16 }, (_, i) => `race${i}`);
    const ready = await Promise.all(ids.map((id, i) => thinking(stores[i % stores.length]!, id)));
    const outcomes = await Promise.allSettled(
      ready.map((s, i) => call(stores[i % stores.length]!, s, { reserve: reservation(s.id), limits: LIMITS })),
    );
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    expect(outcomes.filter((o) => o.status === "rejected" && o.reason instanceof ReservationRefusedError)).toHaveLength(
      15,
    );
    expect(await t.store().otherEffects(reservation("none", { key: "none" }), 0)).toMatchObject({ entityHeld: 45_000 });
  });
}
