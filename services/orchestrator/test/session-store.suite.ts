// The one behavioural suite every SessionStore must pass; each backend's test file only says how
// to open a fresh, empty store on its database.
import { setTimeout as sleep } from "node:timers/promises";
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  canTransition,
  IllegalTransitionError,
  isTerminal,
  SESSION_STATES,
  STOP_REASONS,
  TRANSITIONS,
  type SessionState,
  type StopReason,
} from "../src/session/session-state.js";
import {
  DuplicateStepError,
  LeaseLostError,
  SessionExistsError,
  SessionNotFoundError,
  StaleTransitionError,
  type JsonObject,
  type JsonValue,
  type NewSession,
  type SessionEvent,
  type SessionRecord,
  type SessionStore,
} from "../src/store/session-store.js";
import { effectReservationTests } from "./effect-reservations.suite.js";
import { describeReadersAndQuotas } from "./session-store-readers.suite.js";
import { movesAt } from "./store-move.js";

export interface StoreHarness {
  readonly store: SessionStore;
  /** Lets `ms` pass on the clock leases are measured by: the store's own (SQLite), or the database's (PostgreSQL: real time). */
  elapse(ms: number): Promise<void>;
  /** That clock's time now, in epoch milliseconds. */
  leaseNow(): Promise<number>;
  /** Another store on the same database, as a second replica or process would open it. */
  openAnother(): Promise<SessionStore>;
  /** Runs SQL on the same database behind the store's back, to probe the database's own guards. */
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
}

export type StoreFactory = (options: { now: () => number; advance: (ms: number) => void }) => Promise<StoreHarness>;

export interface SuiteOptions {
  readonly skip?: string;
  /** Store instances on one database hear each other's changes (PostgreSQL; SQLite serves one process). */
  readonly sharedEvents?: boolean;
}

const T0 = 1_767_225_600_000;
/**
 * The lease time-to-live the lease tests use: long enough that no real-time store's lease
 * expires while a test is still between its steps, short enough to wait out.
 */
const TTL = 1_000;

/** A session to create in a store test; `extra` overrides any field. */
export function newSession(id: string, extra: Partial<NewSession> = {}): NewSession {
  return {
    id,
    goal: `refund order for ${id}`,
    task: { kind: "refund", orderId: `ord-${id}`, amountCents: 1250, nested: { tags: ["a", "b"], ok: true } },
    budget: { maxSteps: 20, maxToolCalls: 10, maxTokens: 50_000, maxCostMicros: 2_000_000, deadlineMs: 120_000 },
    scopes: ["billing:read", "billing:refund"],
    policy: "scripted",
    createdBy: "cli:alice",
    ...extra,
  };
}

export function describeSessionStore(name: string, factory: StoreFactory, options: SuiteOptions = {}): void {
  const suite = options.skip ? describe.skip : describe;
  suite(`SessionStore contract: ${name}`, () => {
    let clock = T0;
    const now = (): number => clock;
    let h: StoreHarness;
    let store: SessionStore;
    const extra: SessionStore[] = [];

    beforeEach(async () => {
      clock = T0;
      h = await factory({ now, advance: (ms) => (clock += ms) });
      store = h.store;
    });
    afterEach(async () => {
      for (const s of extra.splice(0)) await s.close();
      await h.close();
    });

    const another = async (): Promise<SessionStore> => {
      const s = await h.openAnother();
      extra.push(s);
      return s;
    };
    const move = movesAt(now);

    /** Drives a session along legal edges, returning the record after the last one. */
    async function drive(
      s: SessionStore,
      id: string,
      path: SessionState[],
      stopReason?: StopReason,
    ): Promise<SessionRecord> {
      let rec = (await s.get(id))!;
      for (const to of path) {
        rec = await move(s, id, rec.state, to, rec.version, {
          patch: isTerminal(to) ? { stopReason: stopReason ?? "done" } : {},
        });
      }
      return rec;
    }

    describe("patrol runs", () => {
      it("keeps every run and lists the newest (by finish) first, as another replica sees them", async () => {
        expect(await store.patrolRuns(5)).toEqual([]);
        const run = (runId: string, finishedAt: number) => ({
          runId,
          finishedAt,
          run: { runId, tasks: 101, passed: 99, successRatio: 99 / 101, stopReasons: { done: 86 } },
        });
        await store.recordPatrolRun(run("pr_a", T0 + 10));
        await store.recordPatrolRun(run("pr_c", T0 + 30));
        await store.recordPatrolRun(run("pr_b", T0 + 20));
        const listed = await (await another()).patrolRuns(2);
        expect(listed).toEqual([run("pr_c", T0 + 30), run("pr_b", T0 + 20)]);
        await expect(store.recordPatrolRun(run("pr_a", T0 + 40))).rejects.toThrow();
      });
    });

    describe("create", () => {
      it("creates an IDLE session at version 0 with everything it was given", async () => {
        clock = T0 + 5;
        const { session, created } = await store.create(newSession("s1", { idempotencyKey: "k1", requestHash: "h1" }));
        expect(created).toBe(true);
        expect(session).toEqual({
          id: "s1",
          state: "IDLE",
          version: 0,
          goal: "refund order for s1",
          task: newSession("s1").task,
          budget: newSession("s1").budget,
          usage: { steps: 0, toolCalls: 0, tokens: 0, costMicros: 0, startedAt: T0 + 5 },
          context: {},
          pending: null,
          scopes: ["billing:read", "billing:refund"],
          policy: "scripted",
          stopReason: null,
          answer: null,
          createdAt: T0 + 5,
          updatedAt: T0 + 5,
          leaseOwner: null,
          leaseExpiresAt: null,
          idempotencyKey: "k1",
          createdBy: "cli:alice",
          requestHash: "h1",
        });
        expect(await store.get("s1")).toEqual(session);
        expect(await store.get("nope")).toBeNull();
      });

      it("returns the existing session for a repeated idempotency key instead of making a second", async () => {
        const first = await store.create(newSession("s1", { idempotencyKey: "same-key" }));
        const again = await store.create(newSession("s2", { idempotencyKey: "same-key", goal: "other" }));
        expect(again.created).toBe(false);
        expect(again.session).toEqual(first.session);
        expect(await store.get("s2")).toBeNull();
        expect((await store.countByState()).IDLE).toBe(1);
      });

      it("scopes idempotency keys by creator: the same key from another caller makes its own session", async () => {
        const alice = await store.create(newSession("s1", { idempotencyKey: "shared-key" }));
        const bob = await store.create(newSession("s2", { idempotencyKey: "shared-key", createdBy: "cli:bob" }));
        expect(bob.created).toBe(true);
        expect(bob.session.id).toBe("s2");
        expect(bob.session.createdBy).toBe("cli:bob");
        const aliceAgain = await store.create(newSession("s3", { idempotencyKey: "shared-key" }));
        expect(aliceAgain).toEqual({ session: alice.session, created: false });
      });

      it("makes exactly one session when creates with one idempotency key race", async () => {
        const results = await Promise.all(
          Array.from({ length: 12 }, (_, i) => store.create(newSession(`race-${i}`, { idempotencyKey: "race-key" }))),
        );
        expect(results.filter((r) => r.created)).toHaveLength(1);
        expect(new Set(results.map((r) => r.session.id)).size).toBe(1);
        expect((await store.list({ limit: 100 })).sessions).toHaveLength(1);
      });

      it("refuses a second session with the same id but no matching key", async () => {
        await store.create(newSession("dup"));
        await expect(store.create(newSession("dup"))).rejects.toBeInstanceOf(SessionExistsError);
        await expect(store.create(newSession("dup", { idempotencyKey: "other" }))).rejects.toBeInstanceOf(
          SessionExistsError,
        );
        expect((await store.countByState()).IDLE).toBe(1);
      });

      it("does not make a session whose caller's call ended before its write began: the create fails with the call's reason", async () => {
        const gone = new Error("the caller's deadline passed");
        const ended = new AbortController();
        ended.abort(gone);
        const create = (id: string, signal: AbortSignal, maxInFlight?: number) =>
          store.create(newSession(id, { signal, ...(maxInFlight ? { maxInFlight } : {}) })).then(
            () => "made",
            (e: unknown) => e,
          );
        const ending = new AbortController();
        // Under a quota the write waits for its turn (the write transaction, the caller's turn on the replica).
        const outcomes = Promise.all([
          create("gone0", ended.signal),
          create("gone1", ended.signal, 5),
          create("gone2", ending.signal, 5),
        ]);
        ending.abort(gone);
        expect(await outcomes).toEqual([gone, gone, gone]);
        expect(await Promise.all(["gone0", "gone1", "gone2"].map((id) => store.get(id)))).toEqual([null, null, null]);
      });
    });

    describe("transition", () => {
      it("persists a legal transition with its patch and its audit row", async () => {
        await store.create(newSession("s1"));
        clock = T0 + 100;
        const usage = { steps: 1, toolCalls: 1, tokens: 321, costMicros: 40, startedAt: T0 };
        const thinking = await move(store, "s1", "IDLE", "THINKING", 0, {
          patch: { usage, context: { messages: [{ role: "user", content: "refund please" }] } },
          audit: { at: T0 + 100, reason: "start" },
        });
        expect(thinking).toMatchObject({ state: "THINKING", version: 1, usage, updatedAt: T0 + 100 });
        const executing = await move(store, "s1", "THINKING", "TOOL_EXECUTING", 1, {
          patch: { pending: { tool: "billing.refund", args: { orderId: "o1" } } },
          audit: {
            at: T0 + 150,
            tool: "billing.refund",
            argsHash: "sha256:abc",
            expectedTimeoutMs: 2_000,
            outcome: "issued",
          },
        });
        expect(executing).toMatchObject({
          state: "TOOL_EXECUTING",
          version: 2,
          usage,
          context: { messages: [{ role: "user", content: "refund please" }] },
          pending: { tool: "billing.refund", args: { orderId: "o1" } },
          stopReason: null,
        });
        expect(await store.get("s1")).toEqual(executing);

        const observing = await move(store, "s1", "TOOL_EXECUTING", "OBSERVING", 2, {
          patch: { pending: null },
          audit: { at: T0 + 180, outcome: "ok" },
        });
        expect(observing.pending).toBeNull();

        expect(await store.auditTrail("s1")).toEqual([
          {
            sessionId: "s1",
            version: 1,
            from: "IDLE",
            to: "THINKING",
            at: T0 + 100,
            reason: "start",
            tool: null,
            argsHash: null,
            expectedTimeoutMs: null,
            outcome: null,
            owner: null,
          },
          {
            sessionId: "s1",
            version: 2,
            from: "THINKING",
            to: "TOOL_EXECUTING",
            at: T0 + 150,
            reason: null,
            tool: "billing.refund",
            argsHash: "sha256:abc",
            expectedTimeoutMs: 2_000,
            outcome: "issued",
            owner: null,
          },
          {
            sessionId: "s1",
            version: 3,
            from: "TOOL_EXECUTING",
            to: "OBSERVING",
            at: T0 + 180,
            reason: null,
            tool: null,
            argsHash: null,
            expectedTimeoutMs: null,
            outcome: "ok",
            owner: null,
          },
        ]);
      });

      it("refuses a transition outside the table and writes nothing", async () => {
        const { session } = await store.create(newSession("s1"));
        for (const to of ["OBSERVING", "TOOL_EXECUTING", "RETRYING", "IDLE"] as const) {
          await expect(move(store, "s1", "IDLE", to, 0)).rejects.toBeInstanceOf(IllegalTransitionError);
        }
        await expect(move(store, "s1", "IDLE", "DONE", 0, { patch: { stopReason: "done" } })).rejects.toBeInstanceOf(
          IllegalTransitionError,
        );
        expect(await store.get("s1")).toEqual(session);
        expect(await store.auditTrail("s1")).toEqual([]);
      });

      it("refuses to leave a terminal state", async () => {
        await store.create(newSession("s1"));
        const done = await drive(store, "s1", ["THINKING", "DONE"]);
        for (const to of SESSION_STATES) {
          await expect(move(store, "s1", "DONE", to, done.version)).rejects.toBeInstanceOf(IllegalTransitionError);
        }
        expect(await store.get("s1")).toEqual(done);
        expect(await store.auditTrail("s1")).toHaveLength(2);
      });

      it("charges an ended session the whole spend, with no new version or audit row, and charges from two replicas at once add up", async () => {
        await store.create(newSession("s1"));
        const live = await drive(store, "s1", ["THINKING"]);
        const usage = { ...live.usage, tokens: 300, costMicros: 40 };
        const ended = await move(store, "s1", "THINKING", "CANCELLED", live.version, {
          patch: { usage, stopReason: "cancelled" },
        });
        // Two replicas' cut-off calls, charged at once: neither is lost; the live part is not what an ended session is charged.
        const charged = await Promise.all([
          store.charge("s1", { tokens: 120, costMicros: 7 }, { tokens: 1, costMicros: 1 }),
          (await another()).charge("s1", { tokens: 80, costMicros: 3 }, { tokens: 1, costMicros: 1 }),
        ]);
        expect(charged).toEqual(["ended", "ended"]);
        expect(await store.get("s1")).toEqual({ ...ended, usage: { ...usage, tokens: 500, costMicros: 50 } });
        expect(await store.auditTrail("s1")).toHaveLength(2);
        expect(await store.charge("nope", { tokens: 1, costMicros: 1 }, { tokens: 1, costMicros: 1 })).toBeUndefined();
      });

      it("charges a live session its live part, and the moves after it keep the charge, with or without the record they move from", async () => {
        await store.create(newSession("s1"));
        const before = await drive(store, "s1", ["THINKING"]);
        expect(await store.charge("s1", { tokens: 999, costMicros: 999 }, { tokens: 49, costMicros: 1234 })).toBe(
          "live",
        );
        const charged = (await store.get("s1"))!;
        expect(charged).toEqual({ ...before, usage: { ...before.usage, tokens: 49, costMicros: 1234 } });
        expect(await store.auditTrail("s1")).toHaveLength(1);
        // The run that holds the session moves from the record it had before the charge, adding its own model call.
        const usage = {
          ...before.usage,
          steps: 1,
          tokens: before.usage.tokens + 10,
          costMicros: before.usage.costMicros + 5,
        };
        const moved = await move(store, "s1", "THINKING", "TOOL_EXECUTING", before.version, {
          patch: { usage },
          current: before,
        });
        const expected = { ...usage, tokens: 59, costMicros: 1239 };
        expect(moved.usage).toEqual(expected);
        expect((await store.get("s1"))!.usage).toEqual(expected);
        // A charge racing the next move from another store instance: both land, whichever commits first.
        const [next] = await Promise.all([
          move(store, "s1", "TOOL_EXECUTING", "OBSERVING", moved.version, {
            patch: { usage: { ...moved.usage, toolCalls: 1, costMicros: moved.usage.costMicros + 100 } },
            current: moved,
          }),
          (await another()).charge("s1", { tokens: 0, costMicros: 0 }, { tokens: 7, costMicros: 3 }),
        ]);
        expect((await store.get("s1"))!.usage).toEqual({ ...expected, toolCalls: 1, tokens: 66, costMicros: 1342 });
        expect(next!.usage.costMicros).toBeGreaterThanOrEqual(1339);
        // A move without the record it moves from writes its usage as given (it cannot know what it adds).
        const last = await move(store, "s1", "OBSERVING", "THINKING", next!.version, {
          patch: { usage: { ...next!.usage, tokens: 1 } },
        });
        expect(last.usage.tokens).toBe(1);
      });

      it("charges tool calls (the host's live reads), and a move from the record before the charge keeps them", async () => {
        await store.create(newSession("s1"));
        const before = await drive(store, "s1", ["THINKING"]);
        const read = { tokens: 0, costMicros: 50, toolCalls: 1 };
        expect(await store.charge("s1", read, read)).toBe("live");
        expect(await (await another()).charge("s1", read, read)).toBe("live");
        expect((await store.get("s1"))!.usage).toEqual({ ...before.usage, toolCalls: 2, costMicros: 100 });
        // The run moves from the record it had before the reads, adding its step, its model call and one call of its own.
        const usage = { ...before.usage, steps: 1, tokens: 10, costMicros: 5, toolCalls: 1 };
        const moved = await move(store, "s1", "THINKING", "TOOL_EXECUTING", before.version, {
          patch: { usage },
          current: before,
        });
        const expected = { ...usage, toolCalls: 3, costMicros: 105 };
        expect(moved.usage).toEqual(expected);
        expect((await store.get("s1"))!.usage).toEqual(expected);
        // An ended session is charged a read as well: it was made.
        const ended = await move(store, "s1", "TOOL_EXECUTING", "CANCELLED", moved.version, {
          patch: { stopReason: "cancelled" },
          current: moved,
        });
        expect(await store.charge("s1", read, { tokens: 0, costMicros: 0 })).toBe("ended");
        expect((await store.get("s1"))!.usage).toEqual({ ...ended.usage, toolCalls: 4, costMicros: 155 });
      });

      it("charges a read's retries with it, live or ended, and the moves from a record before the charge keep them", async () => {
        await store.create(newSession("s1"));
        const before = await drive(store, "s1", ["THINKING"]);
        expect(before.usage.retries).toBeUndefined();
        // A read of one attempt adds no retries figure; a live session is charged only the live part.
        const once = { tokens: 0, costMicros: 50, toolCalls: 1 };
        expect(await store.charge("s1", once, once)).toBe("live");
        const read = { ...once, retries: 2 };
        expect(await store.charge("s1", read, { tokens: 0, costMicros: 0 })).toBe("live");
        expect((await store.get("s1"))!.usage).toEqual({ ...before.usage, toolCalls: 1, costMicros: 50 });
        // Reads retried, charged from two replicas: their retries add up.
        expect(await store.charge("s1", read, read)).toBe("live");
        expect(await (await another()).charge("s1", { ...read, retries: 1 }, { ...read, retries: 1 })).toBe("live");
        expect((await store.get("s1"))!.usage).toEqual({ ...before.usage, toolCalls: 3, costMicros: 150, retries: 3 });
        // The run moves from the record it had before the reads, having retried its model call once.
        const usage = { ...before.usage, steps: 1, tokens: 10, retries: 1 };
        const moved = await move(store, "s1", "THINKING", "TOOL_EXECUTING", before.version, {
          patch: { usage },
          current: before,
        });
        const expected = { ...usage, toolCalls: 3, costMicros: 150, retries: 4 };
        expect(moved.usage).toEqual(expected);
        expect((await store.get("s1"))!.usage).toEqual(expected);
        // A read charged between two moves: the next move, from the record before it, adds no retry and keeps the read's.
        expect(await store.charge("s1", read, read)).toBe("live");
        const observed = await move(store, "s1", "TOOL_EXECUTING", "OBSERVING", moved.version, {
          patch: { usage: { ...moved.usage, toolCalls: moved.usage.toolCalls + 1 } },
          current: moved,
        });
        expect(observed.usage).toEqual({ ...expected, toolCalls: 5, costMicros: 200, retries: 6 });
        expect((await store.get("s1"))!.usage).toEqual(observed.usage);
        // An ended session is charged a read's retries as well: the attempts were made.
        const ended = await move(store, "s1", "OBSERVING", "CANCELLED", observed.version, {
          patch: { stopReason: "cancelled" },
          current: observed,
        });
        expect(await store.charge("s1", read, { tokens: 0, costMicros: 0 })).toBe("ended");
        expect((await store.get("s1"))!.usage).toEqual({ ...ended.usage, toolCalls: 6, costMicros: 250, retries: 8 });
      });

      it("requires a stop reason exactly when entering a terminal state", async () => {
        await store.create(newSession("s1"));
        await drive(store, "s1", ["THINKING"]);
        await expect(move(store, "s1", "THINKING", "DONE", 1)).rejects.toThrow(/stop reason/);
        await expect(
          move(store, "s1", "THINKING", "TOOL_EXECUTING", 1, { patch: { stopReason: "done" } }),
        ).rejects.toBeInstanceOf(IllegalTransitionError);
        expect((await store.get("s1"))?.version).toBe(1);
        const done = await move(store, "s1", "THINKING", "DONE", 1, {
          patch: { stopReason: "done", answer: "Refunded 12.50 EUR to order ord-s1." },
          audit: { at: T0 + 1 },
        });
        expect(done).toMatchObject({
          state: "DONE",
          version: 2,
          stopReason: "done",
          answer: "Refunded 12.50 EUR to order ord-s1.",
        });
        expect(await store.get("s1")).toEqual(done);
      });

      it("stores a NUL or a lone surrogate (which PostgreSQL text cannot hold) from a model or a tool as U+FFFD", async () => {
        await store.create(newSession("s1"));
        // A pair and a written-out "\\u0000" stay as they are.
        const odd = "a\u0000b\ud800c\ud83d\ude00d\\u0000e";
        const clean = "a\ufffdb\ufffdc\ud83d\ude00d\\u0000e";
        const moved = await move(store, "s1", "IDLE", "THINKING", 0, {
          audit: { at: T0, reason: odd, tool: odd, outcome: odd },
          patch: { context: { history: [{ kind: "observation", text: odd }], note: odd }, pending: { said: odd } },
          step: { step: 1, at: T0, payload: { said: odd } },
        });
        expect(await store.get("s1")).toMatchObject({
          context: { history: [{ kind: "observation", text: clean }], note: clean },
          pending: { said: clean },
        });
        await move(store, "s1", "THINKING", "DONE", moved.version, {
          audit: { at: T0 + 1 },
          patch: { stopReason: "done", answer: odd },
        });
        expect((await store.get("s1"))?.answer).toBe(clean);
        expect((await store.steps("s1"))[0]?.payload).toEqual({ said: clean });
        expect((await store.auditTrail("s1"))[0]).toMatchObject({ reason: clean, tool: clean, outcome: clean });
      });

      it("refuses a stale version, a wrong from-state and an unknown session", async () => {
        await store.create(newSession("s1"));
        await move(store, "s1", "IDLE", "THINKING", 0);
        const stale = move(store, "s1", "IDLE", "THINKING", 0);
        await expect(stale).rejects.toBeInstanceOf(StaleTransitionError);
        await expect(stale).rejects.toMatchObject({ actual: { state: "THINKING", version: 1 } });
        await expect(
          move(store, "s1", "THINKING", "DONE", 0, { patch: { stopReason: "done" } }),
        ).rejects.toBeInstanceOf(StaleTransitionError);
        await expect(move(store, "ghost", "IDLE", "THINKING", 0)).rejects.toBeInstanceOf(SessionNotFoundError);
        expect(await store.auditTrail("s1")).toHaveLength(1);
        expect((await store.get("s1"))?.version).toBe(1);
      });

      it("moves through `via` in one transaction, with one version and audit row per move", async () => {
        await store.create(newSession("s1", { lease: { owner: "a", ttlMs: 60_000 } }));
        const executing = await move(store, "s1", "IDLE", "TOOL_EXECUTING", 0, {
          via: [{ state: "THINKING", audit: { at: T0 + 1, reason: "started" } }],
          owner: "a",
          patch: { pending: { call: "c1" } },
          audit: { at: T0 + 2, reason: "calling", tool: "kb.search", expectedTimeoutMs: 500 },
          step: { step: 1, at: T0 + 2, payload: { decision: "search" } },
        });
        expect(executing).toMatchObject({
          state: "TOOL_EXECUTING",
          version: 2,
          pending: { call: "c1" },
          updatedAt: T0 + 2,
        });
        const thinking = await move(store, "s1", "TOOL_EXECUTING", "THINKING", 2, {
          via: [
            { state: "FALLBACK", audit: { at: T0 + 3, outcome: "cache" } },
            { state: "OBSERVING", audit: { at: T0 + 3 } },
          ],
          owner: "a",
          patch: { pending: null, context: { seen: 1 } },
          audit: { at: T0 + 4, reason: "observed" },
          step: { step: 2, at: T0 + 4, payload: { observed: true } },
        });
        expect(thinking).toMatchObject({ state: "THINKING", version: 5, pending: null, context: { seen: 1 } });
        expect(await store.get("s1")).toEqual(thinking);
        expect(
          (await store.auditTrail("s1")).map((a) => [a.version, a.from, a.to, a.at, a.reason ?? a.outcome, a.owner]),
        ).toEqual([
          [1, "IDLE", "THINKING", T0 + 1, "started", "a"],
          [2, "THINKING", "TOOL_EXECUTING", T0 + 2, "calling", "a"],
          [3, "TOOL_EXECUTING", "FALLBACK", T0 + 3, "cache", "a"],
          [4, "FALLBACK", "OBSERVING", T0 + 3, null, "a"],
          [5, "OBSERVING", "THINKING", T0 + 4, "observed", "a"],
        ]);
        expect((await store.steps("s1")).map((x) => x.step)).toEqual([1, 2]);
      });

      it("returns the record as stored whether or not the caller passes the record it moves from", async () => {
        for (const id of ["with", "without"])
          await store.create(newSession(id, { lease: { owner: "a", ttlMs: 60_000 } }));
        const moveOn = async (id: string, pass: boolean, current: SessionRecord, to: SessionState, patch: object) => {
          const next = await move(store, id, current.state, to, current.version, {
            owner: "a",
            patch,
            ...(pass ? { current } : {}),
          });
          expect(next).toEqual(await store.get(id));
          return next;
        };
        for (const pass of [true, false]) {
          const id = pass ? "with" : "without";
          let s = (await store.get(id))!;
          s = await moveOn(id, pass, s, "THINKING", {
            usage: { steps: 1, toolCalls: 0, tokens: 5, costMicros: 0, startedAt: T0 },
          });
          s = await moveOn(id, pass, s, "TOOL_EXECUTING", { pending: { call: "c1" }, context: { history: [1] } });
          await h.elapse(10);
          expect((await store.renewLeases([id], "a", 60_000)).has(id)).toBe(true);
          // The lease moved without a transition: the stale copy passed along still gets the new expiry back.
          const leasedUntil = s.leaseExpiresAt!;
          s = await moveOn(id, pass, s, "OBSERVING", {});
          expect(s.leaseExpiresAt).toBeGreaterThan(leasedUntil);
          s = await moveOn(id, pass, s, "DONE", { stopReason: "done", answer: "ok", pending: null });
          expect(s).toMatchObject({
            state: "DONE",
            stopReason: "done",
            answer: "ok",
            pending: null,
            leaseOwner: null,
            context: { history: [1] },
          });
        }
      });

      it("stores a context's history exactly as it grows, is rewritten, or goes away", async () => {
        await store.create(newSession("s1"));
        let s = await drive(store, "s1", ["THINKING"]);
        const item = (n: number) => ({ kind: "observation", n, text: `item ${n}`, nested: { list: [n, String(n)] } });
        const expectContext = async (context: object) => {
          expect(s.context).toEqual(context);
          expect((await store.get("s1"))?.context).toEqual(context);
        };
        const rewrite = async (context: JsonObject, pass: boolean) => {
          const to =
            s.state === "THINKING" ? "TOOL_EXECUTING" : s.state === "TOOL_EXECUTING" ? "OBSERVING" : "THINKING";
          s = await move(store, "s1", s.state, to, s.version, { patch: { context }, ...(pass ? { current: s } : {}) });
        };
        let history: JsonValue[] = [];
        for (const pass of [true, false, true]) {
          history = [...history, item(history.length), item(history.length + 1)];
          await rewrite({ traceSteps: history.length, history }, pass);
          await expectContext({ traceSteps: history.length, history });
        }
        // Old items replaced (as compression does), then fewer items, then no history at all.
        history = history.map((h, i) => (i < 3 ? { compressed: true, i } : h));
        await rewrite({ history }, true);
        await expectContext({ history });
        await rewrite({ history: history.slice(0, 2), other: "x" }, true);
        await expectContext({ history: history.slice(0, 2), other: "x" });
        await rewrite({ messages: ["no history here"] }, true);
        await expectContext({ messages: ["no history here"] });
        await rewrite({ history: [] }, false);
        await expectContext({ history: [] });
      });

      it("writes nothing of a path with an illegal, stale or failing move", async () => {
        await store.create(newSession("s1"));
        await drive(store, "s1", ["THINKING"]);
        const unchanged = async () => {
          expect(await store.get("s1")).toMatchObject({ state: "THINKING", version: 1 });
          expect(await store.auditTrail("s1")).toHaveLength(1);
        };
        const path = (via: SessionState[], to: SessionState, extra: object = {}) =>
          move(store, "s1", "THINKING", to, 1, {
            via: via.map((state) => ({ state, audit: { at: now() } })),
            ...extra,
          });
        // OBSERVING cannot follow THINKING; a terminal state cannot be passed through.
        await expect(path(["OBSERVING"], "THINKING")).rejects.toBeInstanceOf(IllegalTransitionError);
        await expect(path(["DONE"], "THINKING", { patch: { stopReason: "done" } })).rejects.toBeInstanceOf(
          IllegalTransitionError,
        );
        await expect(path(["TOOL_EXECUTING"], "IDLE")).rejects.toBeInstanceOf(IllegalTransitionError);
        await unchanged();
        await expect(
          move(store, "s1", "THINKING", "OBSERVING", 0, { via: [{ state: "TOOL_EXECUTING", audit: { at: now() } }] }),
        ).rejects.toBeInstanceOf(StaleTransitionError);
        await unchanged();
        // The last move fails (its step number is taken), so the moves before it roll back too.
        await move(store, "s1", "THINKING", "THINKING", 1, { step: { step: 1, at: now(), payload: {} } });
        await expect(
          path(["TOOL_EXECUTING"], "OBSERVING", { expectedVersion: 2, step: { step: 1, at: now(), payload: {} } }),
        ).rejects.toBeInstanceOf(DuplicateStepError);
        expect(await store.get("s1")).toMatchObject({ state: "THINKING", version: 2 });
        expect(await store.auditTrail("s1")).toHaveLength(2);
      });

      it("lets exactly one of 20 racing writers win from the same version", async () => {
        await store.create(newSession("s1"));
        await drive(store, "s1", ["THINKING"]);
        const peer = await another();
        const attempts = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) =>
            move(i % 2 ? peer : store, "s1", "THINKING", i % 3 ? "TOOL_EXECUTING" : "AWAITING_APPROVAL", 1, {
              audit: { at: T0 + i, tool: `tool-${i}` },
            }),
          ),
        );
        const won = attempts.filter((a) => a.status === "fulfilled");
        const lost = attempts.filter((a): a is PromiseRejectedResult => a.status === "rejected");
        expect(won).toHaveLength(1);
        expect(lost).toHaveLength(19);
        for (const l of lost) expect(l.reason).toBeInstanceOf(StaleTransitionError);
        const trail = await store.auditTrail("s1");
        expect(trail).toHaveLength(2);
        const winner = (await store.get("s1"))!;
        expect(winner.version).toBe(2);
        expect(trail[1]).toMatchObject({ version: 2, from: "THINKING", to: winner.state });
      });

      it("has a database that refuses illegal changes made behind the store's back", async () => {
        const { session } = await store.create(newSession("s1"));
        const refused = [
          `UPDATE sessions SET state = 'DONE', stop_reason = 'done', version = version + 1 WHERE id = 's1'`,
          `UPDATE sessions SET state = 'OBSERVING', version = version + 1 WHERE id = 's1'`,
          `UPDATE sessions SET state = 'THINKING', version = version + 2 WHERE id = 's1'`,
          `UPDATE sessions SET version = version + 1 WHERE id = 's1'`,
          `INSERT INTO session_audit (session_id, version, from_state, to_state, at) VALUES ('s1', 1, 'IDLE', 'DONE', 0)`,
          `INSERT INTO sessions (id, state, version, goal, task, budget, usage, context, scopes, policy, stop_reason,
             created_at, updated_at) VALUES ('s2', 'DONE', 0, 'g', '{}', '{}', '{}', '{}', '[]', 'p', 'done', 0, 0)`,
        ];
        for (const sql of refused) await expect(h.exec(sql), sql).rejects.toThrow(/illegal session transition/);
        expect(await store.get("s1")).toEqual(session);
        expect(await store.get("s2")).toBeNull();
        expect(await store.auditTrail("s1")).toEqual([]);
      });

      it("never persists an illegal transition, whatever sequence of events arrives (property)", async () => {
        const stateArb = fc.constantFrom(...SESSION_STATES);
        const eventArb = fc.record({
          useCurrentFrom: fc.boolean(),
          from: stateArb,
          // Mostly legal targets of whatever state the session is in, so runs get deep.
          pick: fc.nat(),
          legalTarget: fc.boolean(),
          to: stateArb,
          stopReason: fc.option(fc.constantFrom(...STOP_REASONS), { nil: undefined, freq: 3 }),
          staleBy: fc.constantFrom(0, 0, 0, 1, -1),
        });
        let run = 0;
        await fc.assert(
          fc.asyncProperty(fc.array(eventArb, { minLength: 1, maxLength: 30 }), async (events) => {
            const id = `prop-${run++}`;
            await store.create(newSession(id));
            let state: SessionState = "IDLE";
            let version = 0;
            for (const e of events) {
              const from: SessionState = e.useCurrentFrom ? state : e.from;
              const legal: readonly SessionState[] = TRANSITIONS[from];
              const to: SessionState = e.legalTarget && legal.length > 0 ? legal[e.pick % legal.length]! : e.to;
              const stopReason = isTerminal(to)
                ? e.stopReason
                : e.stopReason && e.pick % 7 === 0
                  ? e.stopReason
                  : undefined;
              const expectedVersion = Math.max(0, version + e.staleBy);
              const attempt = move(store, id, from, to, expectedVersion, {
                patch: stopReason ? { stopReason } : {},
                audit: { at: now(), reason: `${from}->${to}` },
              });
              const allowed = canTransition(from, to) && isTerminal(to) === (stopReason !== undefined);
              if (!allowed) {
                await expect(attempt).rejects.toBeInstanceOf(IllegalTransitionError);
              } else if (from !== state || expectedVersion !== version) {
                await expect(attempt).rejects.toBeInstanceOf(StaleTransitionError);
              } else {
                const rec = await attempt;
                state = to;
                version += 1;
                expect(rec).toMatchObject({ state, version, stopReason: stopReason ?? null });
              }
            }
            const rec = (await store.get(id))!;
            const trail = await store.auditTrail(id);
            expect(rec.state).toBe(state);
            expect(rec.version).toBe(version);
            expect(trail).toHaveLength(rec.version);
            let replayed: SessionState = "IDLE";
            trail.forEach((row, i) => {
              expect(row.version).toBe(i + 1);
              expect(row.from).toBe(replayed);
              expect(TRANSITIONS[row.from]).toContain(row.to);
              replayed = row.to;
            });
            expect(replayed).toBe(rec.state);
          }),
          { numRuns: 60 },
        );
      });
    });

    describe("leases", () => {
      /** The lease a claim or create just gave `owner` for TTL, read between two readings of the lease clock. */
      function expectLease(s: SessionRecord | undefined, owner: string, before: number, after: number): void {
        expect(s?.leaseOwner).toBe(owner);
        expect(s?.leaseExpiresAt).toBeGreaterThanOrEqual(before + TTL);
        expect(s?.leaseExpiresAt).toBeLessThanOrEqual(after + TTL);
      }

      it("never hands one session to two owners claiming concurrently", async () => {
        for (let i = 0; i < 40; i++) await store.create(newSession(`s${String(i).padStart(2, "0")}`));
        await drive(store, "s00", ["CANCELLED"], "cancelled");
        const peer = await another();
        const byOwner = new Map<string, string[]>([
          ["a", []],
          ["b", []],
        ]);
        for (let round = 0; round < 6; round++) {
          const before = await h.leaseNow();
          const [a, b] = await Promise.all([store.claim("a", TTL, 4), peer.claim("b", TTL, 4)]);
          const after = await h.leaseNow();
          byOwner.get("a")!.push(...a.map((s) => s.id));
          byOwner.get("b")!.push(...b.map((s) => s.id));
          for (const s of a) expectLease(s, "a", before, after);
        }
        const rest = await Promise.all([store.claim("a", TTL, 100), peer.claim("b", TTL, 100)]);
        byOwner.get("a")!.push(...rest[0].map((s) => s.id));
        byOwner.get("b")!.push(...rest[1].map((s) => s.id));
        const all = [...byOwner.get("a")!, ...byOwner.get("b")!];
        expect(new Set(all).size).toBe(all.length);
        expect(all.sort()).toEqual(Array.from({ length: 39 }, (_, i) => `s${String(i + 1).padStart(2, "0")}`));
        expect(await store.claim("c", TTL, 100)).toEqual([]);
        for (const id of byOwner.get("a")!) expect((await store.get(id))?.leaseOwner).toBe("a");
      });

      it("takes turns across creators: one creator's backlog does not hold back another's session", async () => {
        for (let i = 1; i <= 6; i++) await store.create(newSession(`a${i}`, { createdBy: "alice" }));
        await store.create(newSession("b1", { createdBy: "bob" }));
        await store.create(newSession("b2", { createdBy: "bob" }));
        // alice's oldest two are driven; of one free slot at a time, bob's sessions come before her backlog.
        expect((await store.claim("a", TTL, 2)).map((s) => s.id)).toEqual(["a1", "b1"]);
        expect((await store.claim("a", TTL, 1)).map((s) => s.id)).toEqual(["a2"]);
        expect((await store.claim("a", TTL, 1)).map((s) => s.id)).toEqual(["b2"]);
        expect((await store.claim("a", TTL, 10)).map((s) => s.id)).toEqual(["a3", "a4", "a5", "a6"]);
      });

      it("renews every lease it is given in one call and returns the ones the owner still held", async () => {
        for (const id of ["s1", "s2", "s3", "s4"]) await store.create(newSession(id));
        expect((await store.claim("a", TTL, 3)).map((s) => s.id)).toEqual(["s1", "s2", "s3"]);
        expect((await store.claim("b", TTL, 10)).map((s) => s.id)).toEqual(["s4"]);
        await drive(store, "s3", ["THINKING", "FAILED"], "unrecoverable_error");
        await h.elapse(TTL / 2);
        const renewedFrom = await h.leaseNow();
        // s3 ended (no lease), s4 is b's, s5 does not exist: only s1 and s2 come back, renewed.
        expect([...(await store.renewLeases(["s1", "s2", "s3", "s4", "s5"], "a", TTL))].sort()).toEqual(["s1", "s2"]);
        for (const id of ["s1", "s2"]) expectLease((await store.get(id))!, "a", renewedFrom, await h.leaseNow());
        expect((await store.get("s4"))?.leaseOwner).toBe("b");
        expect(await store.renewLeases([], "a", TTL)).toEqual(new Set());
        await h.elapse(TTL + 50);
        expect(await store.renewLeases(["s1", "s2"], "a", TTL)).toEqual(new Set());
      });

      it("lets another owner take over an expired lease and fences the old owner out", async () => {
        await store.create(newSession("s1"));
        const before = await h.leaseNow();
        const [claimed] = await store.claim("a", TTL, 10);
        expectLease(claimed, "a", before, await h.leaseNow());
        expect(claimed).toMatchObject({ id: "s1" });
        await move(store, "s1", "IDLE", "THINKING", 0, { owner: "a" });
        expect(await store.claim("b", TTL, 10)).toEqual([]);
        await h.elapse(TTL / 2);
        const renewedFrom = await h.leaseNow();
        expect((await store.renewLeases(["s1"], "a", TTL)).has("s1")).toBe(true);
        expectLease((await store.get("s1"))!, "a", renewedFrom, await h.leaseNow());
        await h.elapse(TTL + 50);
        const [taken] = await store.claim("b", TTL, 10);
        expect(taken).toMatchObject({ id: "s1", leaseOwner: "b", state: "THINKING", version: 1 });
        expect((await store.renewLeases(["s1"], "a", TTL)).has("s1")).toBe(false);
        const fenced = move(store, "s1", "THINKING", "TOOL_EXECUTING", 1, { owner: "a" });
        await expect(fenced).rejects.toBeInstanceOf(LeaseLostError);
        await expect(fenced).rejects.toBeInstanceOf(StaleTransitionError);
        const next = await move(store, "s1", "THINKING", "TOOL_EXECUTING", 1, { owner: "b" });
        expect(next.version).toBe(2);
        expect((await store.auditTrail("s1")).map((r) => r.owner)).toEqual(["a", "b"]);
        expect(await store.releaseLease("s1", "a")).toBe(false);
        expect(await store.releaseLease("s1", "b")).toBe(true);
        expect(await store.get("s1")).toMatchObject({ leaseOwner: null, leaseExpiresAt: null });
        expect((await store.claim("a", TTL, 10)).map((s) => s.id)).toEqual(["s1"]);
      });

      it("counts a takeover in the usage when it takes a lease another owner let run out, never a lease let go or its own", async () => {
        for (const [id, owner] of [
          ["crashed", "a"],
          ["handed-back", "a"],
          ["own", "b"],
        ] as const) {
          clock += 1;
          await store.create(newSession(id, { lease: { owner, ttlMs: TTL } }));
        }
        clock += 1;
        await store.create(newSession("fresh"));
        const usage = (await store.get("crashed"))!.usage;
        expect(await store.releaseLease("handed-back", "a")).toBe(true);
        await h.elapse(TTL + 50);
        const takeovers = (claimed: readonly SessionRecord[]) => claimed.map((s) => [s.id, s.usage.takeovers]);
        expect(takeovers(await store.claim("b", TTL, 10))).toEqual([
          ["crashed", 1],
          ["handed-back", undefined],
          ["own", undefined],
          ["fresh", undefined],
        ]);
        await h.elapse(TTL + 50);
        expect(takeovers(await store.claim("c", TTL, 10))).toEqual([
          ["crashed", 2],
          ["handed-back", 1],
          ["own", 1],
          ["fresh", 1],
        ]);
        expect((await store.get("crashed"))?.usage).toEqual({ ...usage, takeovers: 2 });
        // The count stays through the new owner's moves, and its version is the moves' alone.
        const moved = await move(store, "crashed", "IDLE", "THINKING", 0, { owner: "c" });
        expect(moved).toMatchObject({ version: 1, usage: { ...usage, takeovers: 2 } });
      });

      it("creates a session already leased to its owner, which nobody else claims until the lease expires", async () => {
        const before = await h.leaseNow();
        const { session } = await store.create(newSession("s1", { lease: { owner: "a", ttlMs: TTL } }));
        expectLease(session, "a", before, await h.leaseNow());
        expect(session).toMatchObject({ state: "IDLE", version: 0 });
        expect(await store.claim("b", TTL, 10)).toEqual([]);
        await move(store, "s1", "IDLE", "THINKING", 0, { owner: "a" });
        await expect(move(store, "s1", "THINKING", "TOOL_EXECUTING", 1, { owner: "b" })).rejects.toBeInstanceOf(
          LeaseLostError,
        );
        await h.elapse(TTL + 50);
        expect((await store.claim("b", TTL, 10)).map((s) => s.id)).toEqual(["s1"]);
      });

      it("refuses an owner's transition once its own lease has expired, even if nobody took over", async () => {
        await store.create(newSession("s1"));
        await store.claim("a", TTL, 10);
        await h.elapse(TTL + 50);
        await expect(move(store, "s1", "IDLE", "THINKING", 0, { owner: "a" })).rejects.toBeInstanceOf(LeaseLostError);
        expect((await store.renewLeases(["s1"], "a", TTL)).has("s1")).toBe(false);
        expect((await store.get("s1"))?.version).toBe(0);
      });

      it("releases the lease on a terminal transition and never claims finished sessions", async () => {
        await store.create(newSession("s1"));
        await store.create(newSession("s2"));
        await store.claim("a", TTL, 10);
        await drive(store, "s1", ["THINKING", "FAILED"], "unrecoverable_error");
        expect(await store.get("s1")).toMatchObject({
          state: "FAILED",
          stopReason: "unrecoverable_error",
          leaseOwner: null,
          leaseExpiresAt: null,
        });
        expect((await store.renewLeases(["s1"], "a", TTL)).has("s1")).toBe(false);
        await h.elapse(TTL + 50);
        expect((await store.claim("b", TTL, 10)).map((s) => s.id)).toEqual(["s2"]);
      });

      it("releases the lease on entering AWAITING_APPROVAL, never claims a waiting session, and claims it again once an approval moves it on", async () => {
        await store.create(newSession("s1", { lease: { owner: "a", ttlMs: TTL } }));
        await move(store, "s1", "IDLE", "THINKING", 0, { owner: "a" });
        const waiting = await move(store, "s1", "THINKING", "AWAITING_APPROVAL", 1, {
          owner: "a",
          current: (await store.get("s1"))!,
          patch: { pending: { approval: { approvalId: "apr_1", expiresAt: T0 + 60_000 } } },
        });
        expect(waiting).toMatchObject({ state: "AWAITING_APPROVAL", leaseOwner: null, leaseExpiresAt: null });
        expect(await store.get("s1")).toMatchObject({
          state: "AWAITING_APPROVAL",
          leaseOwner: null,
          leaseExpiresAt: null,
        });
        expect((await store.renewLeases(["s1"], "a", TTL)).has("s1")).toBe(false);
        expect(await store.claim("a", TTL, 10)).toEqual([]);
        expect(await store.claim("b", TTL, 10)).toEqual([]);
        // The human's answer is an unfenced move (nobody holds the lease); then anyone may claim it.
        await move(store, "s1", "AWAITING_APPROVAL", "TOOL_EXECUTING", 2, {
          patch: { pending: { approvedBy: "bob" } },
        });
        expect((await store.claim("b", TTL, 10)).map((s) => [s.id, s.state, s.leaseOwner])).toEqual([
          ["s1", "TOOL_EXECUTING", "b"],
        ]);
      });
    });

    describe("approvals", () => {
      it("finds the waiting sessions whose approval expired by a given time, oldest first, and nothing else", async () => {
        const wait = async (id: string, expiresAt: number | undefined) => {
          clock += 1;
          await store.create(newSession(id));
          await drive(store, id, ["THINKING"]);
          await move(store, id, "THINKING", "AWAITING_APPROVAL", 1, {
            patch: {
              pending: expiresAt === undefined ? { queue: [] } : { approval: { approvalId: `apr_${id}`, expiresAt } },
            },
          });
        };
        await wait("late", T0 + 5_000);
        await wait("early", T0 + 1_000);
        await wait("exact", T0 + 2_000);
        await wait("none", undefined);
        await store.create(newSession("running"));
        await drive(store, "running", ["THINKING"]);
        expect(await store.expiredApprovals(T0 + 999, 10)).toEqual([]);
        expect((await store.expiredApprovals(T0 + 2_000, 10)).map((s) => s.id)).toEqual(["early", "exact"]);
        expect((await store.expiredApprovals(T0 + 10_000, 2)).map((s) => s.id)).toEqual(["late", "early"]);
        const [first] = await store.expiredApprovals(T0 + 10_000, 1);
        expect(first).toMatchObject({
          id: "late",
          state: "AWAITING_APPROVAL",
          pending: { approval: { approvalId: "apr_late" } },
        });
        await move(store, "early", "AWAITING_APPROVAL", "FAILED", 2, { patch: { stopReason: "approval_denied" } });
        expect((await store.expiredApprovals(T0 + 10_000, 10)).map((s) => s.id)).toEqual(["late", "exact"]);
      });
    });

    describe("parked sessions", () => {
      const park = async (id: string, tool: string, wakeAt: number, parkedAt = T0) => {
        clock += 1;
        await store.create(newSession(id, { lease: { owner: "a", ttlMs: TTL } }));
        await move(store, id, "IDLE", "THINKING", 0, { owner: "a" });
        return move(store, id, "THINKING", "PARKED", 1, {
          owner: "a",
          patch: {
            pending: {
              queue: [],
              park: { tool, reason: "UNAVAILABLE", wakeAt, parkedAt, since: parkedAt, attempts: 1 },
            },
          },
        });
      };

      it("lets go of the lease on parking; claims never take a parked session, wakes take the due ones in wake order", async () => {
        const parked = await park("later", "billing", T0 + 5_000);
        expect(parked).toMatchObject({ state: "PARKED", leaseOwner: null, leaseExpiresAt: null });
        await park("sooner", "billing", T0 + 2_000);
        await park("soonest", "kb-search", T0 + 1_000);
        await store.create(newSession("running"));
        expect((await store.claim("b", TTL, 10)).map((s) => s.id)).toEqual(["running"]);
        expect(await store.wake("b", TTL, 10)).toEqual([]);
        clock = T0 + 2_000;
        const woken = await store.wake("b", TTL, 10);
        expect(woken.map((s) => [s.id, s.state, s.leaseOwner])).toEqual([
          ["soonest", "PARKED", "b"],
          ["sooner", "PARKED", "b"],
        ]);
        // Leased now: another replica's wake does not take them too.
        expect(await store.wake("c", TTL, 10)).toEqual([]);
        // Woken sessions that were not moved on before their lease expired (their replica died) are due again.
        await h.elapse(TTL + 50);
        clock = T0 + 10_000;
        const [taken] = await store.wake("c", TTL, 1);
        expect([taken?.id, taken?.usage.takeovers]).toEqual(["soonest", 1]);
        expect((await store.wake("d", TTL, 10)).map((s) => [s.id, s.usage.takeovers])).toEqual([
          ["sooner", 1],
          ["later", undefined],
        ]);
      });

      it("wakes before their time the sessions parked on a tool before it recovered, and only those", async () => {
        await park("on-billing", "billing", T0 + 60_000, T0);
        await park("on-billing-after", "billing", T0 + 30_000, T0 + 500);
        await park("on-risk", "risk", T0 + 60_000, T0);
        expect(await store.wake("b", TTL, 10, { kb: T0 + 100 })).toEqual([]);
        expect((await store.wake("b", TTL, 10, { billing: T0 + 100 })).map((s) => s.id)).toEqual(["on-billing"]);
        expect((await store.wake("c", TTL, 10, { billing: T0 + 1_000, risk: T0 + 1 })).map((s) => s.id)).toEqual([
          "on-billing-after",
          "on-risk",
        ]);
        // Woken and left to run out (its replica died): the next wake takes it over.
        await h.elapse(TTL + 50);
        expect((await store.wake("d", TTL, 10, { billing: T0 + 1_000 })).map((s) => [s.id, s.usage.takeovers])).toEqual(
          [
            ["on-billing-after", 1],
            ["on-billing", 1],
          ],
        );
      });

      it("counts parked sessions near their deadline and approvals past their expiry", async () => {
        await park("fresh", "billing", T0 + 1_000);
        expect(await store.overdue(T0)).toEqual({ approvals: 0, parkedNearDeadline: 0 });
        const deadlineMs = (await store.get("fresh"))!.budget.deadlineMs;
        expect(await store.overdue(T0 + deadlineMs * 0.85)).toEqual({ approvals: 0, parkedNearDeadline: 1 });
        await store.create(newSession("waiting"));
        await drive(store, "waiting", ["THINKING"]);
        await move(store, "waiting", "THINKING", "AWAITING_APPROVAL", 1, {
          patch: { pending: { approval: { approvalId: "apr_1", expiresAt: T0 + 10 } } },
        });
        expect((await store.overdue(T0 + 11)).approvals).toBe(1);
      });
    });

    describe("events", () => {
      /** Every event `s` tells until the returned function is called. */
      function record(s: SessionStore): { events: SessionEvent[]; stop: () => void } {
        const events: SessionEvent[] = [];
        return { events, stop: s.subscribe((e) => events.push(e)) };
      }

      /** Waits (bounded) until `events` holds one that `match` accepts. */
      async function eventually(events: SessionEvent[], match: (e: SessionEvent) => boolean): Promise<SessionEvent> {
        for (let i = 0; i < 200; i++) {
          const found = events.find(match);
          if (found) return found;
          await sleep(10);
        }
        throw new Error(`no matching event among ${JSON.stringify(events)}`);
      }

      const changedTo = (id: string, version: number) => (e: SessionEvent) =>
        e.kind === "changed" && e.id === id && e.version === version;

      it("tells subscribers of each committed creation, transition and lease release, after the commit, and nothing of a refused one", async () => {
        const { events, stop } = record(store);
        const readAtEvent: { version: number; read: Promise<SessionRecord | null> }[] = [];
        const unsubscribe = store.subscribe((e) => {
          if (e.kind === "changed") readAtEvent.push({ version: e.version, read: store.get(e.id) });
        });
        await store.create(newSession("s1", { lease: { owner: "a", ttlMs: TTL } }));
        expect(await eventually(events, changedTo("s1", 0))).toEqual({
          kind: "changed",
          id: "s1",
          version: 0,
          state: "IDLE",
          leaseOwner: "a",
        });
        await move(store, "s1", "IDLE", "TOOL_EXECUTING", 0, {
          owner: "a",
          via: [{ state: "THINKING", audit: { at: now() } }],
        });
        expect(await eventually(events, changedTo("s1", 2))).toEqual({
          kind: "changed",
          id: "s1",
          version: 2,
          state: "TOOL_EXECUTING",
          leaseOwner: "a",
        });
        const heard = events.length;
        // Refused moves and lease renewals change nothing anyone waits for: no event.
        await expect(move(store, "s1", "IDLE", "THINKING", 0)).rejects.toBeInstanceOf(StaleTransitionError);
        await expect(move(store, "s1", "TOOL_EXECUTING", "OBSERVING", 2, { owner: "b" })).rejects.toBeInstanceOf(
          LeaseLostError,
        );
        expect((await store.renewLeases(["s1"], "a", TTL)).has("s1")).toBe(true);
        expect(await store.releaseLease("s1", "a")).toBe(true);
        const released = await eventually(events, (e) => e.kind === "changed" && e.leaseOwner === null);
        expect(events.slice(heard)).toEqual([released]);
        expect(released).toEqual({ kind: "changed", id: "s1", version: 2, state: "TOOL_EXECUTING", leaseOwner: null });
        await move(store, "s1", "TOOL_EXECUTING", "CANCELLED", 2, { patch: { stopReason: "cancelled" } });
        expect(await eventually(events, changedTo("s1", 3))).toEqual({
          kind: "changed",
          id: "s1",
          version: 3,
          state: "CANCELLED",
          leaseOwner: null,
        });
        stop();
        unsubscribe();
        await store.create(newSession("s2"));
        await sleep(100);
        expect(events.some((e) => e.kind === "changed" && e.id === "s2")).toBe(false);
        // Whoever hears an event can already read what it announces (or something newer).
        expect(readAtEvent.length).toBeGreaterThanOrEqual(4);
        for (const { version, read } of readAtEvent) expect((await read)?.version).toBeGreaterThanOrEqual(version);
      });

      it("keeps telling the other subscribers when one throws", async () => {
        const unsubscribe = store.subscribe(() => {
          throw new Error("a broken listener");
        });
        const { events, stop } = record(store);
        await store.create(newSession("s1"));
        await eventually(events, changedTo("s1", 0));
        stop();
        unsubscribe();
      });

      // Only a store shared by several processes has peers to tell (SQLite serves one process).
      if (options.sharedEvents) {
        it("tells another store instance on the same database (another replica) of this one's changes", async () => {
          const peer = await another();
          const { events, stop } = record(peer);
          await store.create(newSession("s1"));
          await move(store, "s1", "IDLE", "THINKING", 0);
          expect(await eventually(events, changedTo("s1", 1))).toEqual({
            kind: "changed",
            id: "s1",
            version: 1,
            state: "THINKING",
            leaseOwner: null,
          });
          stop();
        });
      }
    });

    describe("reading from where the reader left off", () => {
      it("returns the audit rows after a version and the steps after a step number", async () => {
        await store.create(newSession("s1"));
        let v = 0;
        for (const [i, to] of (["THINKING", "TOOL_EXECUTING", "OBSERVING", "THINKING"] as const).entries()) {
          const from = i === 0 ? "IDLE" : (["THINKING", "TOOL_EXECUTING", "OBSERVING"] as const)[i - 1]!;
          await move(store, "s1", from, to, v, {
            audit: { at: T0 + i },
            ...(i % 2 === 1 ? { step: { step: (i + 1) / 2, at: T0 + i, payload: { i } } } : {}),
          });
          v += 1;
        }
        expect((await store.auditTrail("s1", 2)).map((a) => [a.version, a.to])).toEqual([
          [3, "OBSERVING"],
          [4, "THINKING"],
        ]);
        expect(await store.auditTrail("s1", 4)).toEqual([]);
        expect((await store.auditTrail("s1")).map((a) => a.version)).toEqual([1, 2, 3, 4]);
        expect((await store.steps("s1", 1)).map((s) => s.payload)).toEqual([{ i: 3 }]);
        expect(await store.steps("s1", 2)).toEqual([]);
        expect((await store.steps("s1")).map((s) => s.step)).toEqual([1, 2]);
      });
    });

    describe("list and count", () => {
      it("pages 1,000 sessions by keyset without duplicates or misses, filtered by state or not", async () => {
        const expected: { id: string; createdAt: number; state: SessionState }[] = [];
        for (let i = 0; i < 1_000; i++) {
          // Many sessions share a creation millisecond, so ties must be broken by id.
          clock = T0 + Math.floor(i / 7);
          const id = `p-${(i * 7919) % 1_000}`;
          await store.create(newSession(id));
          let state: SessionState = "IDLE";
          if (i % 3 === 0) state = (await drive(store, id, ["THINKING"])).state;
          if (i % 10 === 0) state = (await drive(store, id, ["FAILED"], "unrecoverable_error")).state;
          expected.push({ id, createdAt: clock, state });
        }
        expected.sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : 1));

        const collect = async (state?: SessionState, limit = 64): Promise<string[]> => {
          const ids: string[] = [];
          let after: string | undefined;
          let pages = 0;
          do {
            const page = await store.list({ limit, ...(state ? { state } : {}), ...(after ? { after } : {}) });
            expect(page.sessions.length).toBeLessThanOrEqual(limit);
            for (const s of page.sessions) if (state) expect(s.state).toBe(state);
            ids.push(...page.sessions.map((s) => s.id));
            after = page.nextCursor ?? undefined;
            pages++;
          } while (after);
          expect(pages).toBe(Math.max(1, Math.ceil(ids.length / limit)));
          return ids;
        };

        expect(await collect()).toEqual(expected.map((e) => e.id));
        expect(await collect(undefined, 1_000)).toEqual(expected.map((e) => e.id));
        for (const state of ["IDLE", "THINKING", "FAILED"] as const) {
          expect(await collect(state, 37)).toEqual(expected.filter((e) => e.state === state).map((e) => e.id));
        }
        expect(await collect("DONE")).toEqual([]);
        const counts = await store.countByState();
        expect(counts).toEqual({
          IDLE: expected.filter((e) => e.state === "IDLE").length,
          THINKING: expected.filter((e) => e.state === "THINKING").length,
          TOOL_EXECUTING: 0,
          OBSERVING: 0,
          RETRYING: 0,
          FALLBACK: 0,
          AWAITING_APPROVAL: 0,
          PARKED: 0,
          DONE: 0,
          FAILED: expected.filter((e) => e.state === "FAILED").length,
          CANCELLED: 0,
        });
        expect(counts.IDLE + counts.THINKING + counts.FAILED).toBe(1_000);
      });

      it("rejects a malformed cursor", async () => {
        await expect(store.list({ limit: 10, after: "not-a-cursor" })).rejects.toBeInstanceOf(RangeError);
      });
    });

    describe("effect reservations", () => effectReservationTests({ store: () => store, another, now, newSession }));
    describeReadersAndQuotas({ store: () => store, another, newSession, drive, tick: () => (clock += 1) });

    describe("steps", () => {
      it("reads steps in order, refusing a duplicate step number or an unknown session", async () => {
        await store.create(newSession("s1"));
        const first = await move(store, "s1", "IDLE", "THINKING", 0, {
          audit: { at: T0 + 1 },
          step: { step: 1, at: T0 + 1, payload: { decision: "call", tool: "billing.getOrder", n: [1, 2] } },
        });
        await move(store, "s1", "THINKING", "TOOL_EXECUTING", first.version, {
          audit: { at: T0 + 2 },
          step: { step: 2, at: T0 + 2, payload: { decision: "call", tool: "billing.refund" } },
        });
        await expect(
          move(store, "s1", "TOOL_EXECUTING", "OBSERVING", 2, {
            audit: { at: T0 + 3 },
            step: { step: 2, at: T0 + 3, payload: {} },
          }),
        ).rejects.toBeInstanceOf(DuplicateStepError);
        await expect(
          move(store, "ghost", "IDLE", "THINKING", 0, { audit: { at: T0 }, step: { step: 1, at: T0, payload: {} } }),
        ).rejects.toBeInstanceOf(SessionNotFoundError);
        expect(await store.steps("s1")).toEqual([
          { step: 1, at: T0 + 1, payload: { decision: "call", tool: "billing.getOrder", n: [1, 2] } },
          { step: 2, at: T0 + 2, payload: { decision: "call", tool: "billing.refund" } },
        ]);
        expect(await store.steps("ghost")).toEqual([]);
      });

      it("stores a step with the transition that completes it, or neither", async () => {
        await store.create(newSession("s1"));
        const moved = await move(store, "s1", "IDLE", "THINKING", 0, {
          audit: { at: T0 },
          step: { step: 1, at: T0, payload: { decision: "start" } },
        });
        expect(moved.version).toBe(1);
        expect(await store.steps("s1")).toEqual([{ step: 1, at: T0, payload: { decision: "start" } }]);
        // A taken step number aborts the whole transition: state, version and audit stay as they were.
        await expect(
          move(store, "s1", "THINKING", "TOOL_EXECUTING", 1, {
            audit: { at: T0 + 1 },
            step: { step: 1, at: T0 + 1, payload: {} },
          }),
        ).rejects.toBeInstanceOf(DuplicateStepError);
        expect((await store.get("s1"))?.state).toBe("THINKING");
        expect(await store.auditTrail("s1")).toHaveLength(1);
        // A stale transition writes no step either.
        await expect(
          move(store, "s1", "IDLE", "THINKING", 0, {
            audit: { at: T0 + 2 },
            step: { step: 2, at: T0 + 2, payload: {} },
          }),
        ).rejects.toBeInstanceOf(StaleTransitionError);
        expect(await store.steps("s1")).toHaveLength(1);
      });
    });
  });
}
