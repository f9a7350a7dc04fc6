import { startTcpProxy } from "@loopguard/sql-store/testing";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "../src/demo-customers.js";
import { PostgresRiskStore } from "../src/postgres-risk-store.js";
import { RiskStoreUnavailableError } from "../src/risk-store.js";
import { describeRiskStore } from "./risk-store.suite.js";
import { testKeys } from "./test-keys.js";

const { skip, freshDatabase } = usePostgres("risk");

describeRiskStore(
  "postgres",
  async () => {
    const url = await freshDatabase();
    const store = await PostgresRiskStore.open(url, testKeys);
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    return {
      store,
      openAnother: (keys = testKeys) => PostgresRiskStore.open(url, keys),
      storedKeys: async () =>
        (await raw.query<{ customer_key: string }>("SELECT customer_key FROM customers")).rows.map(
          (r) => r.customer_key,
        ),
      storedText: async () =>
        JSON.stringify([
          (await raw.query("SELECT * FROM customers")).rows,
          (await raw.query("SELECT * FROM customers_unkeyed")).rows,
          (await raw.query("SELECT * FROM customer_key_pepper")).rows,
        ]),
      async close() {
        await store.close();
        await raw.end();
      },
    };
  },
  skip ? { skip } : {},
);

describe.skipIf(skip !== null)("the PostgreSQL risk store", () => {
  it("seeds once when four replicas open one new database at the same moment", async () => {
    const url = await freshDatabase();
    const replicas = await Promise.all(Array.from({ length: 4 }, () => PostgresRiskStore.open(url, testKeys)));
    try {
      expect(replicas.map((r) => r.migrationsApplied.length).sort()).toEqual([0, 0, 0, 4]);
      for (const r of replicas) expect(await r.size()).toBe(DEMO_CUSTOMERS.length);
    } finally {
      await Promise.all(replicas.map((r) => r.close()));
    }
  });

  it("fails as unavailable, without hanging, when the database stops answering, and recovers", async () => {
    const url = new URL(await freshDatabase());
    const proxy = await startTcpProxy(Number(url.port));
    url.port = String(proxy.port);
    const store = await PostgresRiskStore.open(url.toString(), testKeys);
    const c = DEMO_CUSTOMERS[0]!;
    try {
      proxy.cut();
      const started = Date.now();
      await expect(store.find(c.idCard, c.phone)).rejects.toThrow(RiskStoreUnavailableError);
      // The client's read timeout (statement timeout + 1 s = 1.5 s, QueryRisk's SLA timeout) ends the wait.
      expect(Date.now() - started).toBeLessThan(5000);
      proxy.restore();
      expect((await store.find(c.idCard, c.phone))?.riskScore).toBe(c.riskScore);
    } finally {
      await store.close();
      await proxy.close();
    }
  });
});
