import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openSqlite, retryWhileBusy } from "./sqlite.js";

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

describe("retryWhileBusy", () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(join(tmpdir(), "sql-store-busy-"));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  /** A writer on busy_timeout 0 and another connection holding the write lock. */
  function locked() {
    const file = join(root, "locked.db");
    const writer = openSqlite(file, { busyTimeoutMs: 0 });
    writer.exec("CREATE TABLE t (x INTEGER)");
    const holder = openSqlite(file);
    holder.exec("BEGIN IMMEDIATE");
    const insert = writer.transaction(() => writer.prepare("INSERT INTO t VALUES (1)").run()).immediate;
    return { writer, holder, insert };
  }

  /** Turns of the event loop while `work` runs: a blocked thread has none. */
  async function ticksDuring<T>(work: Promise<T>): Promise<{ ticks: number; ms: number; outcome: T | Error }> {
    let ticks = 0;
    const ticker = setInterval(() => (ticks += 1), 10);
    const started = performance.now();
    const outcome = await work.catch((error: Error) => error);
    clearInterval(ticker);
    return { ticks, ms: performance.now() - started, outcome };
  }

  it("waits for another connection's lock between turns of the event loop, then writes", async () => {
    const { writer, holder, insert } = locked();
    setTimeout(() => holder.exec("ROLLBACK"), 200);
    const { ticks, ms, outcome } = await ticksDuring(retryWhileBusy(insert, 2000));
    expect(outcome).toMatchObject({ changes: 1 });
    expect(ms).toBeGreaterThanOrEqual(190);
    expect(ticks).toBeGreaterThanOrEqual(10);
    expect(writer.prepare("SELECT count(*) AS n FROM t").get()).toEqual({ n: 1 });
    writer.close();
    holder.close();
  });

  it("gives up with SQLITE_BUSY once the lock is held past its timeout, the loop turning all along", async () => {
    const { writer, holder, insert } = locked();
    const { ticks, ms, outcome } = await ticksDuring(retryWhileBusy(insert, 300));
    expect(outcome).toMatchObject({ code: "SQLITE_BUSY" });
    expect(ms).toBeGreaterThanOrEqual(290);
    expect(ms).toBeLessThan(1000);
    expect(ticks).toBeGreaterThanOrEqual(15);
    holder.exec("ROLLBACK");
    expect(writer.prepare("SELECT count(*) AS n FROM t").get()).toEqual({ n: 0 });
    writer.close();
    holder.close();
  });

  it("throws any other error at once", async () => {
    const db = openSqlite(join(root, "plain.db"), { busyTimeoutMs: 0 });
    let tries = 0;
    const failing = () => {
      tries += 1;
      return db.prepare("SELECT * FROM missing").all();
    };
    await expect(retryWhileBusy(failing, 1000)).rejects.toMatchObject({ code: "SQLITE_ERROR" });
    expect(tries).toBe(1);
    db.close();
  });
});
