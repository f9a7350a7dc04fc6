import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { openSessionStore } from "../src/open-store.js";
import { describe, expect, it } from "vitest";
import { SqliteSessionStore } from "../src/sqlite-session-store.js";
import { describeSessionStore } from "./session-store.suite.js";

describeSessionStore("sqlite", async ({ now }) => {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
  const file = join(dir, "sessions.db");
  const store = await openSessionStore(`sqlite:${file}`, { now });
  const raw = new Database(file);
  return {
    store,
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
      await first.create({ id: "old", goal: "g", task: {}, budget: { maxSteps: 1, maxToolCalls: 1, maxTokens: 1, maxCostMicros: 1, deadlineMs: 1 }, scopes: [], policy: "scripted" });
      await first.create({ id: "plain", goal: "g", task: {}, budget: { maxSteps: 1, maxToolCalls: 1, maxTokens: 1, maxCostMicros: 1, deadlineMs: 1 }, scopes: [], policy: "scripted" });
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
