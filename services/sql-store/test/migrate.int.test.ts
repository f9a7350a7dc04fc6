// Migrations on real databases: applied once and in order, recorded per store, all or nothing,
// and once when several openers race (one process's opens for SQLite, replicas for PostgreSQL).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";
import { errorOf } from "@loopguard/test-kit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  MIGRATIONS_TABLE,
  migratePostgres,
  migrateSqlite,
  type PostgresMigration,
  type SqliteMigration,
} from "../src/migrate.js";
import { openMigratedSqlite } from "../src/open.js";
import { createPostgresPool, inTransaction, isPostgresOutage, isPostgresUnavailable } from "../src/postgres.js";
import { startTcpProxy, testPostgres } from "../testing/index.js";

const sqliteMigrations = (log: string[] = []): SqliteMigration[] => [
  {
    name: "0001-things",
    compatibility: "expand",
    up: (db) => {
      log.push("0001");
      db.exec("CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT NOT NULL)");
    },
  },
  {
    name: "0002-thing-colour",
    compatibility: "expand",
    up: (db) => {
      log.push("0002");
      db.exec("ALTER TABLE things ADD COLUMN colour TEXT");
    },
  },
];

describe("migrateSqlite", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "sql-store-migrate-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("applies pending migrations in order, once, and records them for their store only", async () => {
    const file = join(dir, "once.db");
    const log: string[] = [];
    const { db, applied } = await openMigratedSqlite(file, "things", sqliteMigrations(log).slice(0, 1));
    expect(applied).toEqual(["0001-things"]);
    expect(await migrateSqlite(db, "things", sqliteMigrations(log))).toEqual(["0002-thing-colour"]);
    expect(await migrateSqlite(db, "things", sqliteMigrations(log))).toEqual([]);
    expect(log).toEqual(["0001", "0002"]);
    expect(
      await migrateSqlite(db, "other", [
        { name: "0001-things", compatibility: "expand", up: (d) => void d.exec("CREATE TABLE others (x)") },
      ]),
    ).toEqual(["0001-things"]);
    expect(db.prepare(`SELECT store, name FROM ${MIGRATIONS_TABLE} ORDER BY store, name`).all()).toEqual([
      { store: "other", name: "0001-things" },
      { store: "things", name: "0001-things" },
      { store: "things", name: "0002-thing-colour" },
    ]);
    db.close();
  });

  it("leaves the database as it was when a migration fails", async () => {
    const file = join(dir, "failing.db");
    const failing: SqliteMigration[] = [
      sqliteMigrations()[0]!,
      {
        name: "0002-broken",
        compatibility: "expand",
        up: () => {
          throw new Error("broken migration");
        },
      },
    ];
    await expect(openMigratedSqlite(file, "things", failing)).rejects.toThrow("broken migration");
    const db = new Database(file, { readonly: true });
    expect(db.prepare("SELECT name FROM sqlite_master WHERE name = 'things'").all()).toEqual([]);
    db.close();
  });

  it("migrates once when one process opens the same file several times at once", async () => {
    const file = join(dir, "racing.db");
    const log: string[] = [];
    const opened = await Promise.all(
      Array.from({ length: 4 }, () => openMigratedSqlite(file, "things", sqliteMigrations(log))),
    );
    expect(opened.map((o) => o.applied.length).sort()).toEqual([0, 0, 0, 2]);
    expect(log).toEqual(["0001", "0002"]);
    for (const o of opened) o.db.close();
  });
});

const postgres = testPostgres("sql_store");

describe.skipIf(postgres.skip !== null)("on PostgreSQL", () => {
  const fresh = postgres.freshDatabase;
  beforeAll(postgres.start, 120_000);
  afterAll(postgres.stop, 60_000);

  const pgMigrations = (log: string[] = []): PostgresMigration[] => [
    {
      name: "0001-things",
      compatibility: "expand",
      up: async (db) => {
        log.push("0001");
        await db.query("CREATE TABLE things (id int PRIMARY KEY, name text NOT NULL)");
      },
    },
    {
      name: "0002-thing-colour",
      compatibility: "expand",
      up: async (db) => {
        log.push("0002");
        await db.query("ALTER TABLE things ADD COLUMN colour text");
      },
    },
  ];

  it("migrates once when six replicas start on a new database at the same moment", async () => {
    const url = await fresh();
    const log: string[] = [];
    const applied = await Promise.all(
      Array.from({ length: 6 }, () => migratePostgres(url, "things", pgMigrations(log))),
    );
    expect(applied.map((a) => a.length).sort()).toEqual([0, 0, 0, 0, 0, 2]);
    expect(log).toEqual(["0001", "0002"]);
    const pool = createPostgresPool(url);
    expect((await pool.query(`SELECT store, name FROM ${MIGRATIONS_TABLE} ORDER BY name`)).rows).toEqual([
      { store: "things", name: "0001-things" },
      { store: "things", name: "0002-thing-colour" },
    ]);
    await pool.end();
  });

  it("leaves the database as it was when a migration fails", async () => {
    const url = await fresh();
    const failing: PostgresMigration[] = [
      pgMigrations()[0]!,
      {
        name: "0002-broken",
        compatibility: "expand",
        up: async (db) => void (await db.query("SELECT no_such_column FROM things")),
      },
    ];
    await expect(migratePostgres(url, "things", failing)).rejects.toThrow(/no_such_column/);
    const pool = createPostgresPool(url);
    expect((await pool.query("SELECT to_regclass('things') AS t")).rows).toEqual([{ t: null }]);
    await pool.end();
  });

  it("reads bigint columns as numbers and refuses ones a number cannot hold", async () => {
    const pool = createPostgresPool(await fresh());
    expect((await pool.query("SELECT 9007199254740991::bigint AS n")).rows).toEqual([{ n: 9_007_199_254_740_991 }]);
    await expect(pool.query("SELECT 9007199254740993::bigint AS n")).rejects.toThrow(/does not fit/);
    await pool.end();
  });

  it("runs a transaction again when PostgreSQL reports a serialization failure, and rolls back what failed", async () => {
    const pool = createPostgresPool(await fresh());
    await pool.query("CREATE TABLE t (x int)");
    let attempts = 0;
    const result = await inTransaction(pool, async (client) => {
      attempts += 1;
      await client.query("INSERT INTO t VALUES ($1)", [attempts]);
      if (attempts === 1) throw Object.assign(new Error("could not serialize access"), { code: "40001" });
      return "done";
    });
    expect([result, attempts]).toEqual(["done", 2]);
    expect((await pool.query("SELECT x FROM t")).rows).toEqual([{ x: 2 }]);
    await pool.end();
  });

  it("fails a transaction or a migration whose connection drops, between statements or during one, as unavailable: nothing uncaught, nothing of it written, and the next transaction works", async () => {
    const url = new URL(await fresh());
    const proxy = await startTcpProxy(Number(url.port));
    url.port = String(proxy.port);
    const pool = createPostgresPool(url.toString());
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on("uncaughtException", onUncaught);
    try {
      await pool.query("CREATE TABLE t (x int)");
      // restore() closes every connection through the proxy: a reset, as a failover or a restarted router does.
      const between = await errorOf(
        inTransaction(pool, async (client) => {
          await client.query("INSERT INTO t VALUES (1)");
          proxy.restore();
          await sleep(200);
          await client.query("INSERT INTO t VALUES (2)");
        }),
      );
      const during = await errorOf(
        inTransaction(pool, async (client) => {
          await client.query("INSERT INTO t VALUES (3)");
          const sleeping = client.query("SELECT pg_sleep(2)");
          await sleep(200);
          proxy.restore();
          await sleeping;
        }),
      );
      // A migration whose connection drops: the replica's start fails, said plainly, and the ledger is as it was.
      const migration = await errorOf(
        migratePostgres(url.toString(), "things", [
          {
            name: "0001-slow",
            compatibility: "expand",
            up: async (db) => {
              const sleeping = db.query("SELECT pg_sleep(2)");
              await sleep(200);
              proxy.restore();
              await sleeping;
            },
          },
        ]),
      );
      await sleep(200);
      expect([isPostgresUnavailable(between), isPostgresUnavailable(during), isPostgresUnavailable(migration)]).toEqual(
        [true, true, true],
      );
      expect(uncaught).toEqual([]);
      await inTransaction(pool, (client) => client.query("INSERT INTO t VALUES (4)"));
      expect((await pool.query("SELECT x FROM t")).rows).toEqual([{ x: 4 }]);
      expect((await pool.query("SELECT to_regclass('loopguard_schema_migrations') AS t")).rows).toEqual([{ t: null }]);
    } finally {
      process.off("uncaughtException", onUncaught);
      await pool.end();
      await proxy.close();
    }
  });

  it("tells a statement timeout and an unreachable server from a wrong statement, and an outage from a transaction's own conflict", async () => {
    // [unavailable, an outage: meets whoever comes next too]
    const kinds = (error: unknown) => [isPostgresUnavailable(error), isPostgresOutage(error)];
    const url = await fresh();
    const pool = createPostgresPool(url, { statementTimeoutMs: 50 });
    expect(kinds(await errorOf(pool.query("SELECT pg_sleep(1)")))).toEqual([true, true]);
    expect(kinds(await errorOf(pool.query("SELECT * FROM no_such_table")))).toEqual([false, false]);
    expect(kinds(Object.assign(new Error("could not serialize access"), { code: "40001" }))).toEqual([true, false]);
    expect(kinds(Object.assign(new Error("deadlock detected"), { code: "40P01" }))).toEqual([true, false]);
    await pool.end();
    const proxy = await startTcpProxy(1);
    proxy.cut();
    const unreachable = createPostgresPool(`postgres://u@127.0.0.1:${proxy.port}/x`, { connectTimeoutMs: 100 });
    expect(kinds(await errorOf(unreachable.query("SELECT 1")))).toEqual([true, true]);
    await unreachable.end();
    await proxy.close();
    const refused = createPostgresPool(`postgres://u@127.0.0.1:${proxy.port}/x`, { connectTimeoutMs: 100 });
    expect(kinds(await errorOf(refused.query("SELECT 1")))).toEqual([true, true]);
    await refused.end();
  });
});
