import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { openSessionStore } from "../src/open-store.js";
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
