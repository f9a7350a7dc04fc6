import { describe, expect, it } from "vitest";
import { numberOption, UsageError } from "./cli-options.js";

describe("numberOption", () => {
  it("gives the fallback when the option is absent, and the number when it is in range", () => {
    expect(numberOption(undefined, "count", 7, 1, 10)).toBe(7);
    expect(numberOption("3", "count", 7, 1, 10)).toBe(3);
    expect(numberOption("0.5", "threshold", 1, 0, 1, false)).toBe(0.5);
  });

  it("refuses a value out of range, not a number, or not whole where it must be, naming the option", () => {
    expect(() => numberOption("11", "count", 7, 1, 10)).toThrow(
      new UsageError('--count must be an integer in 1..10, got "11"'),
    );
    expect(() => numberOption("x", "over", 0, 0, 5, false)).toThrow(
      new UsageError('--over must be a number in 0..5, got "x"'),
    );
    expect(() => numberOption("2.5", "count", 7, 1, 10)).toThrow(UsageError);
  });
});
