// The shared store suite's part on who sees which session and on the per-creator quota, run by
// describeSessionStore on every backend (see session-store.suite.ts).
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { isTerminal, type SessionState, type StopReason } from "../src/session/session-state.js";
import {
  type NewSession,
  SessionQuotaExceededError,
  type SessionEvent,
  type SessionReader,
  type SessionRecord,
  type SessionStore,
} from "../src/store/session-store.js";

export interface ReadersSuiteContext {
  /** The test's store (opened fresh for each test). */
  store(): SessionStore;
  /** Another store on the same database, as a second replica opens it. */
  another(): Promise<SessionStore>;
  newSession(id: string, extra?: Partial<NewSession>): NewSession;
  drive(store: SessionStore, id: string, path: SessionState[], stopReason?: StopReason): Promise<SessionRecord>;
  /** Moves the store's clock on by a millisecond, so sessions created one after another keep their order. */
  tick(): void;
}

const CREATORS = ["cli:alice", "cli:bob", "cli:carol"] as const;

export function describeReadersAndQuotas(ctx: ReadersSuiteContext): void {
  const { newSession, drive } = ctx;

  /** Every page of a query, each checked full but the last; the ids in order. */
  async function collect(
    store: SessionStore,
    limit: number,
    visibleTo?: SessionReader,
    state?: SessionState,
  ): Promise<string[]> {
    const ids: string[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await store.list({
        limit,
        ...(state ? { state } : {}),
        ...(visibleTo ? { visibleTo } : {}),
        ...(after ? { after } : {}),
      });
      ids.push(...page.sessions.map((s) => s.id));
      after = page.nextCursor ?? undefined;
      if (!after) return ids;
      expect(page.sessions).toHaveLength(limit);
    }
  }

  describe("who sees which session", () => {
    it("lists and counts what a reader sees in the query itself: pages stay full, cursors exact, filtered by state or not", async () => {
      const store = ctx.store();
      const made: { id: string; createdBy: string; state: SessionState }[] = [];
      for (let i = 0; i < 60; i++) {
        ctx.tick();
        const id = `v-${String(i).padStart(2, "0")}`;
        const createdBy = CREATORS[i % 3]!;
        await store.create(newSession(id, { createdBy }));
        let state: SessionState = "IDLE";
        if (i % 4 === 0) state = (await drive(store, id, ["THINKING", "AWAITING_APPROVAL"])).state;
        else if (i % 5 === 0) state = (await drive(store, id, ["FAILED"], "unrecoverable_error")).state;
        else if (i % 7 === 0) state = (await drive(store, id, ["THINKING"])).state;
        made.push({ id, createdBy, state });
      }
      const ids = (keep: (m: (typeof made)[number]) => boolean) => made.filter(keep).map((m) => m.id);
      const alice = { createdBy: "cli:alice", waiting: false };
      const approver = { createdBy: "cli:alice", waiting: true };

      expect(await collect(store, 4, alice)).toEqual(ids((m) => m.createdBy === "cli:alice"));
      expect(await collect(store, 4, approver)).toEqual(
        ids((m) => m.createdBy === "cli:alice" || m.state === "AWAITING_APPROVAL"),
      );
      expect(await collect(store, 3, approver, "AWAITING_APPROVAL")).toEqual(
        ids((m) => m.state === "AWAITING_APPROVAL"),
      );
      expect(await collect(store, 3, alice, "AWAITING_APPROVAL")).toEqual(
        ids((m) => m.createdBy === "cli:alice" && m.state === "AWAITING_APPROVAL"),
      );
      for (const state of ["IDLE", "THINKING", "FAILED"] as const) {
        expect(await collect(store, 2, approver, state)).toEqual(
          ids((m) => m.createdBy === "cli:alice" && m.state === state),
        );
      }
      expect(await collect(store, 5, { createdBy: "cli:nobody", waiting: false })).toEqual([]);
      expect(await collect(store, 5, { createdBy: "cli:nobody", waiting: true })).toEqual(
        ids((m) => m.state === "AWAITING_APPROVAL"),
      );
      expect(await collect(store, 7)).toEqual(ids(() => true));

      const countsOf = (keep: (m: (typeof made)[number]) => boolean) => {
        const seen = made.filter(keep);
        return Object.fromEntries(
          ["IDLE", "THINKING", "AWAITING_APPROVAL", "FAILED"].map((s) => [s, seen.filter((m) => m.state === s).length]),
        );
      };
      expect(await store.countByState(alice)).toMatchObject({
        ...countsOf((m) => m.createdBy === "cli:alice"),
        DONE: 0,
        CANCELLED: 0,
      });
      expect(await store.countByState(approver)).toMatchObject(
        countsOf((m) => m.createdBy === "cli:alice" || m.state === "AWAITING_APPROVAL"),
      );
      expect(await store.countByState({ createdBy: "cli:nobody", waiting: false })).toMatchObject(
        countsOf(() => false),
      );
      expect(await store.countByState()).toMatchObject(countsOf(() => true));
    });
  });

  describe("sessions in flight per creator", () => {
    it("refuses a create past the creator's quota and writes nothing; a retried key, another creator and an ended session are not held back", async () => {
      const store = ctx.store();
      const events: SessionEvent[] = [];
      store.subscribe((e) => events.push(e));
      for (let i = 0; i < 3; i++)
        await store.create(newSession(`q${i}`, { maxInFlight: 3, idempotencyKey: `key-${i}` }));
      const refused = await store.create(newSession("q3", { maxInFlight: 3 })).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(SessionQuotaExceededError);
      expect(refused).toMatchObject({ createdBy: "cli:alice", limit: 3 });
      expect(await store.get("q3")).toBeNull();

      // A start retried with its key gets the session it made, at the quota too.
      expect(await store.create(newSession("q1-again", { maxInFlight: 3, idempotencyKey: "key-1" }))).toEqual({
        session: await store.get("q1"),
        created: false,
      });
      expect((await store.create(newSession("bob", { maxInFlight: 3, createdBy: "cli:bob" }))).created).toBe(true);
      // Subscribers hear of changes in commit order: once bob's creation is heard, the refused one would have been.
      const heard = () => events.flatMap((e) => (e.kind === "changed" ? [e.id] : []));
      for (let i = 0; i < 100 && !heard().includes("bob"); i++) await sleep(20);
      expect(heard()).toEqual(["q0", "q1", "q2", "bob"]);
      // Waiting for an approval is in flight; ending is not.
      await drive(store, "q0", ["THINKING", "AWAITING_APPROVAL"]);
      await expect(store.create(newSession("q4", { maxInFlight: 3 }))).rejects.toBeInstanceOf(
        SessionQuotaExceededError,
      );
      await drive(store, "q1", ["CANCELLED"], "cancelled");
      expect((await store.create(newSession("q4", { maxInFlight: 3 }))).created).toBe(true);
      // The sessions already there count, however they were made: a lower quota refuses at once.
      await expect(store.create(newSession("q5", { maxInFlight: 1 }))).rejects.toBeInstanceOf(
        SessionQuotaExceededError,
      );
      await expect(store.create(newSession("q6", { maxInFlight: 0 }))).rejects.toBeInstanceOf(RangeError);
      const live = (
        await store.list({ limit: 100, visibleTo: { createdBy: "cli:alice", waiting: false } })
      ).sessions.filter((s) => !isTerminal(s.state));
      expect(live.map((s) => s.id)).toEqual(["q0", "q2", "q4"]);
    });

    it("lets exactly the quota through when 20 creates of one creator race over two store instances (two replicas)", async () => {
      const stores = [ctx.store(), await ctx.another()];
      const race = (round: string) =>
        Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            stores[i % 2]!.create(newSession(`${round}-${i}`, { maxInFlight: 5 })).then(
              (r) => r.created,
              (e: unknown) => {
                if (!(e instanceof SessionQuotaExceededError)) throw e;
                return false;
              },
            ),
          ),
        );
      expect((await race("a")).filter(Boolean)).toHaveLength(5);
      const inFlight = async () =>
        (await stores[1]!.list({ limit: 100, visibleTo: { createdBy: "cli:alice", waiting: false } })).sessions.filter(
          (s) => !isTerminal(s.state),
        );
      const made = await inFlight();
      expect(made).toHaveLength(5);
      // At the quota less one, a race lets exactly one more through.
      await drive(stores[0]!, made[0]!.id, ["FAILED"], "unrecoverable_error");
      expect((await race("b")).filter(Boolean)).toHaveLength(1);
      expect(await inFlight()).toHaveLength(5);
    });
  });
}
