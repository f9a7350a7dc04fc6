import pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { openSessionStore } from "../src/open-store.js";
import { postgresSkipReason, startPostgres, type PostgresServer } from "@loopguard/sql-store/testing";
import { describeSessionStore } from "./session-store.suite.js";

const unavailable = postgresSkipReason();
if (unavailable) console.warn(`[orchestrator] skipping the PostgreSQL session store suite: ${unavailable}`);

let server: PostgresServer | undefined;
let databases = 0;

if (!unavailable) {
  beforeAll(async () => {
    server = await startPostgres();
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  }, 60_000);
}

describeSessionStore(
  "postgres",
  async ({ now }) => {
    if (!server) throw new Error("PostgreSQL server did not start");
    // A fresh database per test keeps tests independent without truncating between them.
    const url = await server.createDatabase(`orch_${process.pid}_${++databases}`);
    const store = await openSessionStore(url, { now });
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    return {
      store,
      openAnother: () => openSessionStore(url, { now }),
      async exec(sql) {
        await raw.query(sql);
      },
      async close() {
        await store.close();
        await raw.end();
      },
    };
  },
  unavailable ? { skip: unavailable } : {},
);
