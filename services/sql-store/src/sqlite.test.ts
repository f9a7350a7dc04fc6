import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openSqlite } from "./sqlite.js";

const modeOf = (path: string) => statSync(path).mode & 0o777;

describe("openSqlite", () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), "sql-store-"));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it("creates missing folders 0700 and the database, its WAL and shared-memory files 0600", () => {
    const file = join(root, "a", "b", "store.db");
    const db = openSqlite(file);
    db.exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)");
    expect([modeOf(join(root, "a")), modeOf(join(root, "a", "b"))]).toEqual([0o700, 0o700]);
    expect([file, `${file}-wal`, `${file}-shm`].map(modeOf)).toEqual([0o600, 0o600, 0o600]);
    expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
    db.close();
  });

  it("makes a database file an earlier build left readable to others private", () => {
    const file = join(root, "old.db");
    writeFileSync(file, "");
    chmodSync(file, 0o644);
    openSqlite(file).close();
    expect(modeOf(file)).toBe(0o600);
  });

  it("leaves the mode of a folder that already exists alone", () => {
    const dir = join(root, "shared");
    mkdirSync(dir);
    chmodSync(dir, 0o750);
    openSqlite(join(dir, "store.db")).close();
    expect(modeOf(dir)).toBe(0o750);
  });

  it("applies the synchronous mode, busy timeout and foreign keys asked for", () => {
    const db = openSqlite(join(root, "store.db"), { synchronous: "FULL", busyTimeoutMs: 1234, foreignKeys: true });
    expect([
      db.pragma("synchronous", { simple: true }),
      db.pragma("busy_timeout", { simple: true }),
      db.pragma("foreign_keys", { simple: true }),
    ]).toEqual([2, 1234, 1]);
    db.close();
  });
});
