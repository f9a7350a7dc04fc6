import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { openSessionStore } from "../src/store/open-store.js";
import { describe, expect, it } from "vitest";
import { DuplicateStepError, StoreUnavailableError } from "../src/store/session-store.js";
import { SqliteSessionStore } from "../src/store/sqlite-session-store.js";
import { describeSessionStore, newSession as session } from "./session-store.suite.js";

describeSessionStore("sqlite", async ({ now, advance }) => {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
  const file = join(dir, "sessions.db");
  const store = await openSessionStore(`sqlite:${file}`, { now });
  const raw = new Database(file);
  return {
    store,
    async elapse(ms) {
      advance(ms);
    },
    async leaseNow() {
      return now();
    },
    openAnother: () => openSessionStore(`sqlite:${file}`, { now }),
    async exec(sql) {
      raw.exec(sql);
    },
    async close() {
      await store.close();
      raw.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe("sqlite stores opened together", () => {
  it("four stores opened at once on one file, new or migrated, with or without migrating, all open: none waits on another's migration", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    try {
      for (let round = 0; round < 5; round += 1) {
        const file = join(dir, `sessions-${round}.db`);
        const stores = await Promise.all([
          SqliteSessionStore.open(file),
          SqliteSessionStore.open(file),
          SqliteSessionStore.open(file),
          SqliteSessionStore.open(file),
        ]);
        const again = await Promise.all([
          SqliteSessionStore.open(file),
          SqliteSessionStore.open(file, { migrate: false }),
          stores[0]!.create(session(`s${round}`)),
        ]);
        for (const s of [...stores, again[0], again[1]]) await s.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite group commit", () => {
  it("commits at most 32 writes per turn of the event loop, so sessions moving together do not move in lockstep", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const store = await SqliteSessionStore.open(join(dir, "sessions.db"));
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    try {
      const budget = { maxSteps: 5, maxToolCalls: 5, maxTokens: 1000, maxCostMicros: 1000, deadlineMs: 60_000 };
      const ids = Array.from({ length: 80 }, (_, i) => `s${i}`);
      for (const id of ids)
        await store.create({ id, goal: "g", task: {}, budget, scopes: [], policy: "scripted", createdBy: "test" });
      let answered = 0;
      const moves = ids.map((id) =>
        store
          .transition({ id, from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } })
          .then(() => (answered += 1)),
      );
      const answeredPerTurn: number[] = [];
      for (let i = 0; i < 3; i += 1) {
        await turn();
        answeredPerTurn.push(answered);
      }
      expect(answeredPerTurn).toEqual([32, 64, 80]);
      await Promise.all(moves);
      expect((await store.countByState()).THINKING).toBe(80);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a write that fails in a group commit leaves no trace and is told its error; the others commit once, each told once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const store = await SqliteSessionStore.open(join(dir, "sessions.db"));
    try {
      for (const id of ["s0", "s1", "s2"]) await store.create(session(id));
      const first = { step: 1, at: Date.now(), payload: {} };
      await store.transition({
        id: "s1",
        from: "IDLE",
        to: "THINKING",
        expectedVersion: 0,
        audit: { at: Date.now() },
        step: first,
      });
      const events: string[] = [];
      const stop = store.subscribe((e) => events.push(e.kind === "changed" ? `${e.id}@${e.version}` : e.kind));
      const think = (id: string) =>
        store.transition({ id, from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } });
      // Asked in one turn: s1's move and audit row are written before its step number is found taken.
      const outcomes = await Promise.allSettled([
        think("s0"),
        store.transition({
          id: "s1",
          from: "THINKING",
          to: "TOOL_EXECUTING",
          expectedVersion: 1,
          audit: { at: Date.now() },
          step: first,
        }),
        think("s2"),
      ]);
      stop();
      expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
      expect((outcomes[1] as PromiseRejectedResult).reason).toBeInstanceOf(DuplicateStepError);
      expect(events.sort()).toEqual(["s0@1", "s2@1"]);
      expect(await store.get("s1")).toMatchObject({ state: "THINKING", version: 1 });
      expect((await store.auditTrail("s1")).map((a) => a.to)).toEqual(["THINKING"]);
      for (const id of ["s0", "s2"]) {
        expect(await store.get(id)).toMatchObject({ state: "THINKING", version: 1 });
        expect(await store.auditTrail(id)).toHaveLength(1);
      }
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite store errors", () => {
  it("reports a database another process holds locked past the busy timeout as StoreUnavailableError (told to onUnavailable); the next write after it works", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const file = join(dir, "sessions.db");
    const told: StoreUnavailableError[] = [];
    const store = await SqliteSessionStore.open(file, { busyTimeoutMs: 100, onUnavailable: (e) => told.push(e) });
    const other = new Database(file);
    try {
      await store.create(session("s1"));
      other.exec("BEGIN IMMEDIATE");
      const [created, moved] = await Promise.all(
        [
          store.create(session("s2")),
          store.transition({ id: "s1", from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } }),
        ].map((p) =>
          p.then(
            () => undefined,
            (e: unknown) => e,
          ),
        ),
      );
      other.exec("ROLLBACK");
      expect(created).toBeInstanceOf(StoreUnavailableError);
      expect((created as StoreUnavailableError).operation).toBe("create");
      expect((moved as StoreUnavailableError).operation).toBe("transition");
      expect((created as Error).message).toMatch(/database is locked/);
      expect(told.map((e) => e.operation).sort()).toEqual(["create", "transition"]);
      // Reads go on meanwhile (WAL), and nothing of the refused writes was kept.
      expect(await store.get("s2")).toBeNull();
      expect((await store.get("s1"))?.version).toBe(0);
      await store.create(session("s2"));
      expect((await store.get("s2"))?.state).toBe("IDLE");
    } finally {
      other.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
