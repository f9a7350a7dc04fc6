import { describe, expect, it } from "vitest";
import { backoffDelayMs } from "./backoff.js";

describe("backoffDelayMs", () => {
  it("doubles from the base and stops at the cap", () => {
    const plain = { baseMs: 100, maxMs: 1000, jitter: "none" as const };
    expect([1, 2, 3, 4, 5, 60].map((attempt) => backoffDelayMs(plain, attempt))).toEqual([
      100, 200, 400, 800, 1000, 1000,
    ]);
  });

  it("spreads full jitter over [0, ceiling] and equal jitter over [ceiling/2, ceiling]", () => {
    const full = { baseMs: 100, maxMs: 1000, jitter: "full" as const };
    const equal = { ...full, jitter: "equal" as const };
    expect(backoffDelayMs(full, 3, () => 0)).toBe(0);
    expect(backoffDelayMs(full, 3, () => 0.999)).toBeCloseTo(399.6);
    expect(backoffDelayMs(equal, 3, () => 0)).toBe(200);
    expect(backoffDelayMs(equal, 3, () => 0.5)).toBe(300);
  });

  it("treats an attempt below 1 as the first", () => {
    expect(backoffDelayMs({ baseMs: 50, maxMs: 500, jitter: "none" }, 0)).toBe(50);
  });
});
