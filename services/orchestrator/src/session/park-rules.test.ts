import { status } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { PARK_BASE_MS, PARK_MAX_MS, passes, passesByName, wakeTime } from "./park-rules.js";

describe("wakeTime", () => {
  it("doubles the wait with each park of the same call, half of it fixed and half random, up to the cap", () => {
    for (const [attempts, backoff] of [
      [0, PARK_BASE_MS],
      [1, 2 * PARK_BASE_MS],
      [2, 4 * PARK_BASE_MS],
      [10, PARK_MAX_MS],
      [50, PARK_MAX_MS],
    ] as const) {
      expect(wakeTime(0, attempts, undefined, () => 0)).toBe(backoff / 2);
      expect(wakeTime(0, attempts, undefined, () => 0.999_999)).toBe(backoff);
    }
  });

  it("never wakes before the tool's (or its breaker's) RetryInfo", () => {
    expect(wakeTime(1000, 0, 7000, () => 0.5)).toBe(8000);
    expect(wakeTime(1000, 3, 100, () => 0)).toBe(1000 + 4 * PARK_BASE_MS);
  });
});

describe("which failures pass", () => {
  it("the tool down, overloaded or too slow; never a caller's mistake or a refusal", () => {
    for (const code of [status.UNAVAILABLE, status.RESOURCE_EXHAUSTED, status.DEADLINE_EXCEEDED])
      expect(passes({ code })).toBe(true);
    for (const code of [
      status.INVALID_ARGUMENT,
      status.NOT_FOUND,
      status.FAILED_PRECONDITION,
      status.PERMISSION_DENIED,
      status.INTERNAL,
    ])
      expect(passes({ code })).toBe(false);
    expect([passesByName("UNAVAILABLE"), passesByName("EPRECOND"), passesByName("NOT_FOUND")]).toEqual([
      true,
      false,
      false,
    ]);
  });
});
