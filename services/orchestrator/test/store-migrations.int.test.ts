// Databases made by the layouts in use before versioned migrations (their DDL copied into
// fixtures/) upgrade without losing sessions: each is made from its fixture, given sessions by
// plain SQL, opened by today's store, read back and driven on.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import Database from "better-sqlite3";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { POSTGRES_SESSION_MIGRATIONS } from "../src/migrations/postgres/index.js";
import { SQLITE_SESSION_MIGRATIONS } from "../src/migrations/sqlite/index.js";
import { openSessionStore } from "../src/store/open-store.js";
import { TRANSITION_PAIRS } from "../src/session/session-state.js";
import { SessionQuotaExceededError, type SessionStore } from "../src/store/session-store.js";
import { movesAt } from "./store-move.js";

const fixture = (name: string): string => readFileSync(new URL(`fixtures/${name}`, import.meta.url), "utf8");

const history = [{ kind: "call", tool: "kb_search_search", args: { query: "refunds" } }, "text item"];
const budget = { maxSteps: 5, maxToolCalls: 5, maxTokens: 1000, maxCostMicros: 1000, deadlineMs: 60_000 };
/** Today's store moves the upgraded sessions on at 4000, after every seeded time. */
const move = movesAt(() => 4000);

interface Layout {
  /** Where the layout kept context.history: inside sessions.context, or as session_history rows. */
  readonly historyRows: boolean;
  /** Whether sessions had created_by (idempotency keys scoped by creator). */
  readonly creator: boolean;
}

/** Three sessions, written as the build of that layout would have: one IDLE with a key, one THINKING with history, one DONE. */
function seedSql({ historyRows, creator }: Layout): string {
  const lit = (v: unknown) => `'${JSON.stringify(v).replaceAll("'", "''")}'`;
  const session = (id: string, key: string | null) =>
    `('${id}', 'IDLE', 0, 'goal of ${id}', ${lit({ kind: "refund", id })}, ${lit(budget)}, ${lit({ steps: 0, toolCalls: 0, tokens: 0, costMicros: 0, startedAt: 1000 })},
      '{}', NULL, ${lit(["billing:read"])}, 'scripted', NULL, NULL, 1000, 1000, NULL, NULL, ${key === null ? "NULL" : `'${key}'`}${creator ? ", 'cli:alice'" : ""})`;
  const context = historyRows ? lit({ note: "kept" }) : lit({ note: "kept", history });
  return `
    INSERT INTO session_transitions (from_state, to_state) VALUES ${TRANSITION_PAIRS.map(([f, t]) => `('${f}', '${t}')`).join(", ")};
    INSERT INTO sessions (id, state, version, goal, task, budget, usage, context, pending, scopes, policy, stop_reason, answer,
      created_at, updated_at, lease_owner, lease_expires_at, idempotency_key${creator ? ", created_by" : ""})
      VALUES ${session("idle", "k")}, ${session("moving", null)}, ${session("done", null)};
    UPDATE sessions SET state = 'THINKING', version = 1, updated_at = 2000, context = ${context}${historyRows ? ", history_len = 2" : ""}
      WHERE id IN ('moving', 'done');
    INSERT INTO session_audit (session_id, version, from_state, to_state, at, reason) VALUES
      ('moving', 1, 'IDLE', 'THINKING', 2000, 'start'), ('done', 1, 'IDLE', 'THINKING', 2000, 'start');
    ${historyRows ? `INSERT INTO session_history (session_id, seq, item) VALUES ${history.map((item, i) => `('moving', ${i}, ${lit(item)}), ('done', ${i}, ${lit(item)})`).join(", ")};` : ""}
    UPDATE sessions SET state = 'DONE', version = 2, updated_at = 3000, stop_reason = 'done', answer = '42' WHERE id = 'done';
    INSERT INTO session_audit (session_id, version, from_state, to_state, at) VALUES ('done', 2, 'THINKING', 'DONE', 3000);
    INSERT INTO session_steps (session_id, step, at, payload) VALUES ('moving', 1, 2000, ${lit({ n: 1 })});`;
}

/** Reads the seeded sessions back through the store, then drives them on. */
async function readAndContinue(store: SessionStore, layout: Layout): Promise<void> {
  expect(await store.get("idle")).toMatchObject({
    state: "IDLE",
    version: 0,
    idempotencyKey: "k",
    task: { kind: "refund", id: "idle" },
    budget,
  });
  const moving = (await store.get("moving"))!;
  expect(moving).toMatchObject({
    state: "THINKING",
    version: 1,
    goal: "goal of moving",
    context: { note: "kept", history },
  });
  expect(await store.get("done")).toMatchObject({
    state: "DONE",
    version: 2,
    stopReason: "done",
    answer: "42",
    context: { note: "kept", history },
  });
  expect((await store.list({ state: "THINKING", limit: 10 })).sessions.map((s) => s.id)).toEqual(["moving"]);
  expect(await store.countByState()).toMatchObject({ IDLE: 1, THINKING: 1, DONE: 1 });
  // Found by their creator (rows from before creators were recorded have ''), and counted by the quota.
  const creator = { createdBy: layout.creator ? "cli:alice" : "", waiting: false };
  expect((await store.list({ limit: 10, visibleTo: creator })).sessions.map((s) => s.id)).toEqual([
    "done",
    "idle",
    "moving",
  ]);
  expect(await store.countByState(creator)).toMatchObject({ IDLE: 1, THINKING: 1, DONE: 1 });
  await expect(
    store.create({
      id: "over",
      goal: "g",
      task: {},
      budget,
      scopes: [],
      policy: "scripted",
      createdBy: creator.createdBy,
      maxInFlight: 2,
    }),
  ).rejects.toBeInstanceOf(SessionQuotaExceededError);
  expect((await store.auditTrail("done")).map((a) => a.to)).toEqual(["THINKING", "DONE"]);
  expect(await store.steps("moving")).toEqual([{ step: 1, at: 2000, payload: { n: 1 } }]);

  const grown = [...history, { kind: "observation", n: 3 }];
  const next = await move(store, "moving", "THINKING", "TOOL_EXECUTING", 1, {
    current: moving,
    patch: { context: { ...moving.context, history: grown } },
    audit: { at: 4000, tool: "kb_search_search" },
    step: { step: 2, at: 4000, payload: { n: 2 } },
  });
  expect(next).toMatchObject({ state: "TOOL_EXECUTING", version: 2 });
  expect((await store.get("moving"))?.context).toEqual({ note: "kept", history: grown });
  expect((await store.steps("moving", 1)).map((s) => s.step)).toEqual([2]);
  await move(store, "idle", "IDLE", "THINKING", 0);
  expect((await store.get("idle"))?.version).toBe(1);
  // States and stop reasons added since the layout was made are accepted by its database.
  await move(store, "idle", "THINKING", "PARKED", 1, {
    patch: { pending: { queue: [], park: { tool: "billing", wakeAt: 4500 } } },
  });
  await move(store, "idle", "PARKED", "FAILED", 2, { patch: { stopReason: "tool_unavailable" } });
  expect(await store.get("idle")).toMatchObject({ state: "FAILED", stopReason: "tool_unavailable" });
  const again = await store.create({
    id: "new",
    goal: "g",
    task: {},
    budget,
    scopes: [],
    policy: "scripted",
    createdBy: "cli:bob",
    idempotencyKey: "k",
  });
  expect(again.created).toBe(true);
}

describe("sqlite: databases made before versioned migrations", () => {
  for (const [version, layout] of [
    [0, { historyRows: false, creator: false }],
    [1, { historyRows: true, creator: false }],
    [3, { historyRows: true, creator: true }],
  ] as const) {
    it(`upgrades user_version ${version} without losing sessions, and migrates once`, async () => {
      const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
      const file = join(dir, "sessions.db");
      try {
        const raw = new Database(file);
        raw.exec(fixture(`sqlite-layout-${version}.sql`));
        raw.exec(seedSql(layout));
        raw.close();

        const store = await openSessionStore(`sqlite:${file}`);
        await readAndContinue(store, layout);
        await store.close();
        const reopened = await openSessionStore(`sqlite:${file}`);
        expect((await reopened.get("moving"))?.version).toBe(2);
        await reopened.close();

        const check = new Database(file, { readonly: true });
        expect(
          check
            .prepare(`SELECT name FROM loopguard_schema_migrations WHERE store = 'orchestrator-sessions'`)
            .pluck()
            .all(),
        ).toEqual(SQLITE_SESSION_MIGRATIONS.map((m) => m.name));
        expect(check.prepare(`SELECT context FROM sessions WHERE id = 'moving'`).pluck().get()).toBe(
          JSON.stringify({ note: "kept" }),
        );
        const indexes = check
          .prepare(
            `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions' AND sql IS NOT NULL ORDER BY name`,
          )
          .pluck()
          .all();
        expect(indexes).toEqual([
          "sessions_approval_expiry",
          "sessions_by_created",
          "sessions_by_creator",
          "sessions_by_creator_open",
          "sessions_claimable",
          "sessions_ended",
          "sessions_open",
          "sessions_parked",
        ]);
        expect(check.prepare(`SELECT sql FROM sqlite_master WHERE name = 'sessions'`).pluck().get()).not.toMatch(
          / IN \(/,
        );
        expect(check.prepare(`SELECT count(*) FROM sqlite_master WHERE type = 'trigger'`).pluck().get()).toBe(3);
        expect(check.pragma("foreign_key_check")).toEqual([]);
        check.close();
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});

const postgres = usePostgres("orchestrator-migrations");

describe.skipIf(postgres.skip !== null)("postgres: a database made before versioned migrations", () => {
  it("upgrades today's schema (no version recorded) without losing sessions: history moves into rows", async () => {
    const url = await postgres.freshDatabase();
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    try {
      await raw.query(fixture("postgres-unversioned.sql"));
      const layout = { historyRows: false, creator: true };
      await raw.query(seedSql(layout));

      const store = await openSessionStore(url);
      try {
        await readAndContinue(store, layout);
      } finally {
        await store.close();
      }
      const { rows } = await raw.query<{ name: string }>(
        `SELECT name FROM loopguard_schema_migrations WHERE store = 'orchestrator-sessions' ORDER BY name`,
      );
      expect(rows.map((r) => r.name)).toEqual(POSTGRES_SESSION_MIGRATIONS.map((m) => m.name));
      const moved = await raw.query<{ context: unknown; history_len: number; items: string }>(
        `SELECT context, history_len, (SELECT count(*) FROM session_history WHERE session_id = 'moving') AS items FROM sessions WHERE id = 'moving'`,
      );
      expect(moved.rows[0]).toEqual({ context: { note: "kept" }, history_len: 3, items: "3" });
      const reopened = await openSessionStore(url);
      expect((await reopened.get("done"))?.context).toEqual({ note: "kept", history });
      await reopened.close();
    } finally {
      await raw.end();
    }
  });
});
