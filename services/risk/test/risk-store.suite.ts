// The one behavioural suite every RiskStore must pass; each backend's test file only says how to
// open a store on a fresh database and how to look at what it stored behind its back.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DEMO_CUSTOMERS } from "../src/demo-customers.js";
import {
  CustomerKeys,
  legacyCustomerKey,
  PepperMismatchError,
  type RiskStore,
  RiskStoreUnavailableError,
} from "../src/risk-store.js";
import { TEST_PEPPER, testKeys } from "./test-keys.js";

export interface RiskStoreHarness {
  readonly store: RiskStore;
  /** Another store on the same database, as a second replica or a restart would open it. */
  openAnother(keys?: CustomerKeys): Promise<RiskStore>;
  /** The customer keys as stored. */
  storedKeys(): Promise<string[]>;
  /** Everything the database holds for the store, as text (rows, and files where there are any). */
  storedText(): Promise<string>;
  close(): Promise<void>;
}

export type RiskStoreFactory = () => Promise<RiskStoreHarness>;

export function describeRiskStore(name: string, factory: RiskStoreFactory, options: { skip?: string } = {}): void {
  const suite = options.skip ? describe.skip : describe;
  suite(`RiskStore contract: ${name}`, () => {
    let h: RiskStoreHarness;
    const extra: RiskStore[] = [];
    beforeEach(async () => {
      h = await factory();
    });
    afterEach(async () => {
      for (const s of extra.splice(0)) await s.close();
      await h.close();
    });
    const another = async (keys?: CustomerKeys) => {
      const s = await h.openAnother(keys);
      extra.push(s);
      return s;
    };

    it("seeds the demo customers on first start and finds each by id card and phone", async () => {
      expect(await h.store.size()).toBe(DEMO_CUSTOMERS.length);
      for (const c of DEMO_CUSTOMERS) {
        expect(await h.store.find(c.idCard, c.phone)).toEqual({
          riskScore: c.riskScore,
          reason: c.reason,
          factors: [...c.factors],
        });
      }
    });

    it("finds each demo customer by every customer id they hold, and nobody by an unknown one", async () => {
      for (const c of DEMO_CUSTOMERS) {
        for (const id of c.customerIds)
          expect(await h.store.findByCustomerId(id)).toEqual({
            riskScore: c.riskScore,
            reason: c.reason,
            factors: [...c.factors],
          });
      }
      expect(await h.store.findByCustomerId("cust_nobody")).toBeUndefined();
    });

    it("does not migrate or seed again when reopened", async () => {
      expect(h.store.migrationsApplied).toEqual([
        "0001-customers",
        "0002-peppered-customer-keys",
        "0003-demo-customers",
        "0004-customer-ids",
      ]);
      const reopened = await another();
      expect(reopened.migrationsApplied).toEqual([]);
      expect(await reopened.size()).toBe(DEMO_CUSTOMERS.length);
    });

    it("answers the same from a second replica", async () => {
      const replica = await another();
      for (const c of DEMO_CUSTOMERS)
        expect(await replica.find(c.idCard, c.phone)).toEqual(await h.store.find(c.idCard, c.phone));
    });

    it("finds nobody for an id card with another customer's phone", async () => {
      const [a, b] = DEMO_CUSTOMERS;
      expect(await h.store.find(a!.idCard, b!.phone)).toBeUndefined();
    });

    it("keys customers by HMAC-SHA256 under the pepper, not by bare SHA-256", async () => {
      const stored = (await h.storedKeys()).sort();
      expect(stored).toEqual(DEMO_CUSTOMERS.map((c) => testKeys.key(c.idCard, c.phone)).sort());
      for (const c of DEMO_CUSTOMERS) expect(stored).not.toContain(legacyCustomerKey(c.idCard, c.phone));
      expect(
        new CustomerKeys(`${TEST_PEPPER}-other`).key(DEMO_CUSTOMERS[0]!.idCard, DEMO_CUSTOMERS[0]!.phone),
      ).not.toBe(stored[0]);
    });

    it("keeps no id card, phone or pepper anywhere in what it stores", async () => {
      const text = await h.storedText();
      expect(text.length).toBeGreaterThan(0);
      for (const c of DEMO_CUSTOMERS) {
        expect(text).not.toContain(c.idCard);
        expect(text).not.toContain(c.phone.slice(3));
      }
      expect(text).not.toContain(TEST_PEPPER);
    });

    it("refuses to open a database whose keys were made with another pepper", async () => {
      await expect(h.openAnother(new CustomerKeys(`${TEST_PEPPER}-other`))).rejects.toThrow(PepperMismatchError);
      expect((await h.store.find(DEMO_CUSTOMERS[0]!.idCard, DEMO_CUSTOMERS[0]!.phone))?.riskScore).toBe(
        DEMO_CUSTOMERS[0]!.riskScore,
      );
    });

    it("reports itself unavailable when switched off, and recovers when switched on", async () => {
      const c = DEMO_CUSTOMERS[0]!;
      h.store.available = false;
      await expect(h.store.find(c.idCard, c.phone)).rejects.toThrow(RiskStoreUnavailableError);
      h.store.available = true;
      expect((await h.store.find(c.idCard, c.phone))?.riskScore).toBe(c.riskScore);
    });

    it("reports itself unavailable once closed", async () => {
      await h.store.close();
      await h.store.close();
      const c = DEMO_CUSTOMERS[0]!;
      await expect(h.store.find(c.idCard, c.phone)).rejects.toThrow(RiskStoreUnavailableError);
    });
  });
}
