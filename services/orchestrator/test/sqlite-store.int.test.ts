import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { openSessionStore } from "../src/open-store.js";
import { describe, expect, it } from "vitest";
import { StoreUnavailableError } from "../src/session-store.js";
import { SqliteSessionStore } from "../src/sqlite-session-store.js";
import { describeSessionStore } from "./session-store.suite.js";

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

describe("sqlite layout upgrade", () => {
  it("moves the history of a database written by an earlier build into history rows, once", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const file = join(dir, "sessions.db");
    try {
      const first = new SqliteSessionStore(file);
      await first.create({ id: "old", goal: "g", task: {}, budget: { maxSteps: 1, maxToolCalls: 1, maxTokens: 1, maxCostMicros: 1, deadlineMs: 1 }, scopes: [], policy: "scripted", createdBy: "test" });
      await first.create({ id: "plain", goal: "g", task: {}, budget: { maxSteps: 1, maxToolCalls: 1, maxTokens: 1, maxCostMicros: 1, deadlineMs: 1 }, scopes: [], policy: "scripted", createdBy: "test" });
      await first.close();
      // What an earlier build left: history inside the context column, no history_len column.
      const history = [{ kind: "call", tool: "kb_search_search" }, { kind: "observation", n: 2 }, "text item"];
      const raw = new Database(file);
      raw.exec(`DROP TABLE session_history; ALTER TABLE sessions DROP COLUMN history_len; PRAGMA user_version = 0;`);
      raw.prepare(`UPDATE sessions SET context = ? WHERE id = 'old'`).run(JSON.stringify({ traceSteps: 3, history }));
      raw.prepare(`UPDATE sessions SET context = ? WHERE id = 'plain'`).run(JSON.stringify({ messages: [1] }));
      raw.close();

      const upgraded = new SqliteSessionStore(file);
      expect((await upgraded.get("old"))?.context).toEqual({ traceSteps: 3, history });
      expect((await upgraded.get("plain"))?.context).toEqual({ messages: [1] });
      await upgraded.close();
      const again = new SqliteSessionStore(file);
      expect((await again.get("old"))?.context).toEqual({ traceSteps: 3, history });
      await again.close();
      const check = new Database(file, { readonly: true });
      expect(check.prepare(`SELECT count(*) FROM session_history`).pluck().get()).toBe(3);
      expect(check.prepare(`SELECT context FROM sessions WHERE id = 'old'`).pluck().get()).toBe(JSON.stringify({ traceSteps: 3 }));
      check.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite layout 2", () => {
  const budget = { maxSteps: 5, maxToolCalls: 5, maxTokens: 5, maxCostMicros: 5, deadlineMs: 60_000 };
  const states = "'IDLE', 'THINKING', 'TOOL_EXECUTING', 'OBSERVING', 'RETRYING', 'FALLBACK', 'AWAITING_APPROVAL', 'DONE', 'FAILED', 'CANCELLED'";
  /** The tables layout 1 declared differently: CHECKs with IN lists, indexes on state, steps WITHOUT ROWID. */
  const LAYOUT_1 = `
    CREATE TABLE sessions_old (
      id TEXT PRIMARY KEY,
      state TEXT NOT NULL CHECK (state IN (${states})),
      version INTEGER NOT NULL CHECK (version >= 0),
      goal TEXT NOT NULL, task TEXT NOT NULL, budget TEXT NOT NULL, usage TEXT NOT NULL, context TEXT NOT NULL,
      pending TEXT, scopes TEXT NOT NULL, policy TEXT NOT NULL,
      stop_reason TEXT CHECK (stop_reason IS NULL OR stop_reason IN ('done', 'cancelled')),
      answer TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, lease_owner TEXT,
      lease_expires_at INTEGER, idempotency_key TEXT UNIQUE, history_len INTEGER,
      CHECK ((state IN ('DONE', 'FAILED', 'CANCELLED')) = (stop_reason IS NOT NULL))
    );
    INSERT INTO sessions_old SELECT id, state, version, goal, task, budget, usage, context, pending, scopes, policy, stop_reason,
      answer, created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, history_len FROM sessions;
    DROP TRIGGER session_audit_guard;
    DROP TABLE sessions;
    ALTER TABLE sessions_old RENAME TO sessions;
    CREATE TABLE steps_old (session_id TEXT NOT NULL REFERENCES sessions (id), step INTEGER NOT NULL CHECK (step >= 1),
      at INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (session_id, step)) WITHOUT ROWID;
    INSERT INTO steps_old SELECT session_id, step, at, payload FROM session_steps;
    DROP TABLE session_steps;
    ALTER TABLE steps_old RENAME TO session_steps;
    CREATE INDEX sessions_by_created ON sessions (created_at, id);
    CREATE INDEX sessions_by_state ON sessions (state, created_at, id);
    CREATE INDEX sessions_live ON sessions (created_at, id) WHERE state <> 'DONE' AND state <> 'FAILED' AND state <> 'CANCELLED';
    PRAGMA user_version = 1;`;
  const plan = (db: Database.Database, sql: string) =>
    db.prepare<[], { detail: string }>(`EXPLAIN QUERY PLAN ${sql}`).all().map((r) => r.detail).join("; ");

  it("rebuilds a layout 1 sessions table: rows kept, CHECKs without IN lists, indexed on stop_reason, guards in place", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const file = join(dir, "sessions.db");
    try {
      const first = new SqliteSessionStore(file);
      for (const id of ["a", "b", "c"]) await first.create({ id, goal: "g", task: {}, budget, scopes: [], policy: "scripted", createdBy: "test" });
      const a = (await first.get("a"))!;
      const thinking = await first.transition({ id: "a", from: "IDLE", to: "THINKING", expectedVersion: 0, current: a, audit: { at: 1 } });
      await first.transition({ id: "a", from: "THINKING", to: "DONE", expectedVersion: thinking.version, current: thinking, patch: { stopReason: "done", answer: "x" }, audit: { at: 2 }, step: { step: 1, at: 2, payload: { answer: "x" } } });
      await first.close();
      const raw = new Database(file);
      raw.pragma("foreign_keys = OFF");
      raw.exec(LAYOUT_1);
      raw.close();

      const upgraded = new SqliteSessionStore(file);
      expect(await upgraded.get("a")).toMatchObject({ state: "DONE", version: 2, stopReason: "done", answer: "x" });
      expect((await upgraded.list({ state: "DONE", limit: 10 })).sessions.map((s) => s.id)).toEqual(["a"]);
      expect((await upgraded.list({ state: "IDLE", limit: 10 })).sessions.map((s) => s.id)).toEqual(["b", "c"]);
      expect(await upgraded.countByState()).toMatchObject({ DONE: 1, IDLE: 2, THINKING: 0 });
      expect((await upgraded.auditTrail("a")).map((r) => r.to)).toEqual(["THINKING", "DONE"]);
      expect(await upgraded.steps("a")).toEqual([{ step: 1, at: 2, payload: { answer: "x" } }]);
      const b = (await upgraded.get("b"))!;
      await expect(upgraded.transition({ id: "b", from: "IDLE", to: "DONE", expectedVersion: 0, current: b, patch: { stopReason: "done" }, audit: { at: 3 } })).rejects.toThrow(/illegal/i);
      await upgraded.close();

      const check = new Database(file);
      expect(check.pragma("user_version", { simple: true })).toBe(3);
      const table = check.prepare<[], string>(`SELECT sql FROM sqlite_master WHERE name = 'sessions'`).pluck().get()!;
      expect(table).not.toMatch(/ IN \(/);
      expect(check.prepare<[], string>(`SELECT sql FROM sqlite_master WHERE name = 'session_steps'`).pluck().get()).not.toMatch(/WITHOUT ROWID/);
      const indexes = check.prepare<[], string>(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions' AND sql IS NOT NULL ORDER BY name`).pluck().all();
      expect(indexes).toEqual(["sessions_by_created", "sessions_ended", "sessions_open"]);
      expect(plan(check, `SELECT id FROM sessions WHERE state = 'DONE' AND stop_reason IS NOT NULL ORDER BY created_at, id`)).toContain("sessions_ended");
      expect(plan(check, `SELECT id FROM sessions WHERE state = 'IDLE' AND stop_reason IS NULL ORDER BY created_at, id`)).toContain("sessions_open");
      // The guards SCHEMA brought back: a state outside the machine, an illegal edge, a forged audit row.
      expect(() => check.exec(`UPDATE sessions SET state = 'BOGUS', version = version + 1 WHERE id = 'c'`)).toThrow();
      expect(() => check.exec(`UPDATE sessions SET state = 'OBSERVING', version = version + 1 WHERE id = 'c'`)).toThrow(/illegal session transition/);
      expect(() => check.exec(`INSERT INTO session_audit (session_id, version, from_state, to_state, at) VALUES ('c', 5, 'IDLE', 'THINKING', 1)`)).toThrow(/illegal session transition/);
      check.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite layout 3", () => {
  it("upgrades a layout 2 database: sessions kept with creator '', idempotency keys then scoped by creator", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const file = join(dir, "sessions.db");
    const budget = { maxSteps: 1, maxToolCalls: 1, maxTokens: 1, maxCostMicros: 1, deadlineMs: 1 };
    try {
      const first = new SqliteSessionStore(file);
      await first.create({ id: "keyed", goal: "g", task: {}, budget, scopes: [], policy: "scripted", createdBy: "ignored", idempotencyKey: "k" });
      await first.close();
      // What layout 2 looked like: no creator or request hash, one key per database.
      const raw = new Database(file);
      raw.pragma("foreign_keys = OFF");
      const columns = "id, state, version, goal, task, budget, usage, context, pending, scopes, policy, stop_reason, answer, created_at, updated_at, lease_owner, lease_expires_at, idempotency_key, history_len";
      const layout2 = raw
        .prepare<[], string>(`SELECT sql FROM sqlite_master WHERE name = 'sessions'`)
        .pluck()
        .get()!
        .replace(/CREATE TABLE sessions/, "CREATE TABLE sessions_v2")
        .replace(/idempotency_key TEXT,/, "idempotency_key TEXT UNIQUE,")
        .replace(/\s*created_by TEXT NOT NULL DEFAULT '',\s*request_hash TEXT,\s*UNIQUE \(created_by, idempotency_key\),/, "");
      expect(layout2).not.toMatch(/created_by/);
      raw.exec(`DROP TRIGGER IF EXISTS sessions_start_idle; DROP TRIGGER IF EXISTS sessions_transition_guard; DROP TRIGGER IF EXISTS session_audit_guard;
        ${layout2}; INSERT INTO sessions_v2 (${columns}) SELECT ${columns} FROM sessions; DROP TABLE sessions; ALTER TABLE sessions_v2 RENAME TO sessions;
        PRAGMA user_version = 2;`);
      raw.close();

      const upgraded = new SqliteSessionStore(file);
      expect(await upgraded.get("keyed")).toMatchObject({ state: "IDLE", createdBy: "", requestHash: null, idempotencyKey: "k" });
      const other = await upgraded.create({ id: "new", goal: "g", task: {}, budget, scopes: [], policy: "scripted", createdBy: "cli:bob", idempotencyKey: "k" });
      expect(other.created).toBe(true);
      await upgraded.close();
      const check = new Database(file);
      expect(check.pragma("user_version", { simple: true })).toBe(3);
      check.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("sqlite group commit", () => {
  it("commits at most 16 writes per turn of the event loop, so sessions moving together do not move in lockstep", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    const store = new SqliteSessionStore(join(dir, "sessions.db"));
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    try {
      const budget = { maxSteps: 5, maxToolCalls: 5, maxTokens: 1000, maxCostMicros: 1000, deadlineMs: 60_000 };
      const ids = Array.from({ length: 40 }, (_, i) => `s${i}`);
      for (const id of ids) await store.create({ id, goal: "g", task: {}, budget, scopes: [], policy: "scripted", createdBy: "test" });
      let answered = 0;
      const moves = ids.map((id) => store.transition({ id, from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } }).then(() => (answered += 1)));
      const answeredPerTurn: number[] = [];
      for (let i = 0; i < 3; i += 1) {
        await turn();
        answeredPerTurn.push(answered);
      }
      expect(answeredPerTurn).toEqual([16, 32, 40]);
      await Promise.all(moves);
      expect((await store.countByState()).THINKING).toBe(40);
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
    const store = new SqliteSessionStore(file, { busyTimeoutMs: 100, onUnavailable: (e) => told.push(e) });
    const other = new Database(file);
    const session = (id: string) => ({ id, goal: "g", task: {}, budget: { maxSteps: 1, maxToolCalls: 1, maxTokens: 1, maxCostMicros: 1, deadlineMs: 1000 }, scopes: [], policy: "scripted", createdBy: "test" });
    try {
      await store.create(session("s1"));
      other.exec("BEGIN IMMEDIATE");
      const [created, moved] = await Promise.all(
        [store.create(session("s2")), store.transition({ id: "s1", from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } })].map((p) =>
          p.then(() => undefined, (e: unknown) => e),
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
