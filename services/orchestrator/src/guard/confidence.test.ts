import { describe, expect, it } from "vitest";
import { belowThreshold, clampConfidence, MAX_UNCERTAINTY_REASON_CHARS, statedConfidence } from "./confidence.js";

describe("clampConfidence", () => {
  it("keeps a fraction, reads a numeric string, takes 1..100 as percent and clamps the rest into 0..1", () => {
    expect(clampConfidence(0.42)).toBe(0.42);
    expect(clampConfidence("0.8")).toBe(0.8);
    expect(clampConfidence(85)).toBe(0.85);
    expect(clampConfidence(250)).toBe(1);
    expect(clampConfidence(-3)).toBe(0);
  });

  it("has no value for what is not a number", () => {
    for (const value of [undefined, null, "", "high", Number.NaN, Number.POSITIVE_INFINITY, {}, [0.5], true])
      expect(clampConfidence(value)).toBeUndefined();
  });
});

describe("statedConfidence", () => {
  it("is nothing when the policy stated none", () => {
    expect(statedConfidence({})).toBeUndefined();
  });

  it("bounds the reason to a sentence or two on one line and redacts personal data from it", () => {
    const stated = statedConfidence({
      confidence: 0.3,
      uncertaintyReason: `the customer 13800138000 may\\nbe ${"x".repeat(2000)}`.replace("\\n", "\n"),
    });
    expect(stated?.value).toBe(0.3);
    expect(stated?.reason).not.toContain("13800138000");
    expect(stated?.reason).not.toContain("\n");
    expect(stated!.reason.length).toBeLessThanOrEqual(MAX_UNCERTAINTY_REASON_CHARS);
  });
});

describe("belowThreshold", () => {
  it("says why below the threshold, and nothing at or above it or when nothing was stated", () => {
    expect(belowThreshold({ value: 0.3, reason: "the order's status was not read" }, 0.6)).toBe(
      "confidence 0.3 is below 0.6: the order's status was not read",
    );
    expect(belowThreshold({ value: 0.3, reason: "" }, 0.6)).toBe("confidence 0.3 is below 0.6");
    expect(belowThreshold({ value: 0.6, reason: "" }, 0.6)).toBeUndefined();
    expect(belowThreshold(undefined, 0.6)).toBeUndefined();
  });
});
