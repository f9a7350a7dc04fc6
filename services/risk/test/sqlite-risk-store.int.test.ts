import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { sqliteModes } from "@loopguard/test-kit";
import { describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "../src/demo-customers.js";
import { legacyCustomerKey } from "../src/risk-store.js";
import { SqliteRiskStore } from "../src/sqlite-risk-store.js";
import { describeRiskStore } from "./risk-store.suite.js";
import { testKeys } from "./test-keys.js";

describeRiskStore("sqlite", async () => {
  const dir = mkdtempSync(join(tmpdir(), "risk-store-"));
  const file = join(dir, "risk.db");
  const store = await SqliteRiskStore.open(file, testKeys);
  return {
    store,
    openAnother: (keys = testKeys) => SqliteRiskStore.open(file, keys),
    async storedKeys() {
      const db = new Database(file, { readonly: true });
      const keys = db.prepare<[], string>("SELECT customer_key FROM customers").pluck().all();
      db.close();
      return keys;
    },
    storedText: async () =>
      readdirSync(dir)
        .map((name) => readFileSync(join(dir, name)).toString("latin1"))
        .join(""),
    async close() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});

/** What every build before peppering made: bare SHA-256 keys, no migrations table, user_version 1. */
const UNPEPPERED_LAYOUT = `
  CREATE TABLE customers (
    customer_key TEXT PRIMARY KEY,
    risk_score INTEGER NOT NULL CHECK (risk_score BETWEEN -1 AND 100),
    reason TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 200),
    factors TEXT NOT NULL
  ) STRICT, WITHOUT ROWID;
  PRAGMA user_version = 1;`;

describe("the SQLite risk store file", () => {
  it("is created 0600 in a folder created 0700", async () => {
    const root = mkdtempSync(join(tmpdir(), "risk-store-"));
    try {
      const store = await SqliteRiskStore.open(join(root, "data", "risk.db"), testKeys);
      expect(sqliteModes(join(root, "data"), "risk.db")).toEqual([0o700, 0o600, 0o600, 0o600]);
      await store.close();
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("re-keys the demo customers of an unpeppered database and sets aside the rows it cannot re-key", async () => {
    const dir = mkdtempSync(join(tmpdir(), "risk-store-"));
    const file = join(dir, "risk.db");
    try {
      const old = new Database(file);
      old.exec(UNPEPPERED_LAYOUT);
      const insert = old.prepare("INSERT INTO customers VALUES (?, ?, ?, ?)");
      for (const c of DEMO_CUSTOMERS)
        insert.run(legacyCustomerKey(c.idCard, c.phone), c.riskScore, c.reason, JSON.stringify(c.factors));
      // A customer an operator added: its raw id card and phone were never stored, so it cannot be re-keyed.
      const stranger = { idCard: "110101199001153454", phone: "+8613512345678" };
      insert.run(legacyCustomerKey(stranger.idCard, stranger.phone), 40, "Added by an operator.", "[]");
      old.close();

      const store = await SqliteRiskStore.open(file, testKeys);
      expect(store.migrationsApplied).toEqual([
        "0001-customers",
        "0002-peppered-customer-keys",
        "0003-demo-customers",
        "0004-customer-ids",
      ]);
      for (const c of DEMO_CUSTOMERS) expect((await store.find(c.idCard, c.phone))?.riskScore).toBe(c.riskScore);
      expect(await store.find(stranger.idCard, stranger.phone)).toBeUndefined();
      expect([await store.size(), await store.unkeyedCount()]).toEqual([DEMO_CUSTOMERS.length, 1]);
      await store.close();

      const db = new Database(file, { readonly: true });
      expect(db.prepare<[], string>("SELECT customer_key FROM customers").pluck().all().sort()).toEqual(
        DEMO_CUSTOMERS.map((c) => testKeys.key(c.idCard, c.phone)).sort(),
      );
      expect(db.prepare("SELECT customer_key, risk_score FROM customers_unkeyed").all()).toEqual([
        { customer_key: legacyCustomerKey(stranger.idCard, stranger.phone), risk_score: 40 },
      ]);
      db.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
