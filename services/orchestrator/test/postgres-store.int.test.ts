import pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { testPostgres } from "@loopguard/sql-store/testing";
import { openSessionStore } from "../src/open-store.js";
import { describeSessionStore } from "./session-store.suite.js";

const postgres = testPostgres("orchestrator");
if (!postgres.skip) {
  beforeAll(postgres.start, 120_000);
  afterAll(postgres.stop, 60_000);
}

describeSessionStore(
  "postgres",
  async ({ now }) => {
    const url = await postgres.freshDatabase();
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
  postgres.skip ? { skip: postgres.skip } : {},
);
