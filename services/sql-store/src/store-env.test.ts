import { describe, expect, it } from "vitest";
import { seedDemo, storePoolSize } from "./store-env.js";

describe("store settings from the environment", () => {
  it("reads <PREFIX>_STORE_POOL_SIZE, leaving the store's default when unset and refusing what is not a pool size", () => {
    expect(storePoolSize({}, "BILLING")).toBeUndefined();
    expect(storePoolSize({ BILLING_STORE_POOL_SIZE: "3" }, "BILLING")).toBe(3);
    for (const bad of ["0", "2.5", "many", "101"]) {
      expect(() => storePoolSize({ BILLING_STORE_POOL_SIZE: bad }, "BILLING")).toThrow(
        `BILLING_STORE_POOL_SIZE must be an integer in 1..100, got "${bad}"`,
      );
    }
  });

  it('seeds demo data unless <PREFIX>_SEED_DEMO is "false", and refuses anything but true or false', () => {
    expect(seedDemo({}, "RISK")).toBe(true);
    expect(seedDemo({ RISK_SEED_DEMO: "true" }, "RISK")).toBe(true);
    expect(seedDemo({ RISK_SEED_DEMO: "false" }, "RISK")).toBe(false);
    expect(() => seedDemo({ RISK_SEED_DEMO: "no" }, "RISK")).toThrow(
      'RISK_SEED_DEMO must be "true" or "false", got "no"',
    );
  });
});
