import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "./demo-customers.js";
import { customerKey, RiskStore, RiskStoreUnavailableError } from "./risk-store.js";

describe("RiskStore", () => {
  let dir: string;
  let file: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "risk-store-"));
    file = join(dir, "risk.db");
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("seeds the demo customers on first start and finds each by id card and phone", () => {
    const store = RiskStore.open(file);
    expect(store.size()).toBe(DEMO_CUSTOMERS.length);
    for (const c of DEMO_CUSTOMERS) {
      expect(store.find(c.idCard, c.phone)).toEqual({ riskScore: c.riskScore, reason: c.reason, factors: [...c.factors] });
    }
    store.close();
  });

  it("does not seed again when reopened", () => {
    RiskStore.open(file).close();
    const store = RiskStore.open(file);
    expect(store.size()).toBe(DEMO_CUSTOMERS.length);
    store.close();
  });

  it("finds nobody for an id card with another customer's phone", () => {
    const store = RiskStore.open(file);
    const [a, b] = DEMO_CUSTOMERS;
    expect(store.find(a!.idCard, b!.phone)).toBeUndefined();
    store.close();
  });

  it("keeps only hashes: no id card or phone in any row or in the database files", () => {
    const store = RiskStore.open(file);
    store.close();
    const db = new Database(file, { readonly: true });
    const rows = db.prepare("SELECT * FROM customers").all() as Record<string, unknown>[];
    db.close();
    expect(rows.map((r) => r.customer_key).sort()).toEqual(DEMO_CUSTOMERS.map((c) => customerKey(c.idCard, c.phone)).sort());
    const bytes = readdirSync(dir)
      .map((name) => readFileSync(join(dir, name)).toString("latin1"))
      .join("");
    for (const c of DEMO_CUSTOMERS) {
      expect(bytes).not.toContain(c.idCard);
      expect(bytes).not.toContain(c.phone.slice(3));
    }
  });

  it("reports itself unavailable when switched off, and recovers when switched on", () => {
    const store = RiskStore.open(file);
    const c = DEMO_CUSTOMERS[0]!;
    store.available = false;
    expect(() => store.find(c.idCard, c.phone)).toThrow(RiskStoreUnavailableError);
    store.available = true;
    expect(store.find(c.idCard, c.phone)?.riskScore).toBe(c.riskScore);
    store.close();
  });

  it("reports itself unavailable once closed", () => {
    const store = RiskStore.open(file);
    store.close();
    store.close();
    const c = DEMO_CUSTOMERS[0]!;
    expect(() => store.find(c.idCard, c.phone)).toThrow(RiskStoreUnavailableError);
  });
});
