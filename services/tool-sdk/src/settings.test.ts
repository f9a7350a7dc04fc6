import { describe, expect, it } from "vitest";
import {
  booleanSetting,
  ConfigError,
  enumSetting,
  fractionSetting,
  integerSetting,
  optionalIntegerSetting,
  switchSetting,
} from "./settings.js";

describe("integerSetting", () => {
  const spec = { default: 7, min: 1, max: 100 };

  it("is the default when unset or empty", () => {
    expect(integerSetting({}, "X_SIZE", spec)).toBe(7);
    expect(integerSetting({ X_SIZE: "" }, "X_SIZE", spec)).toBe(7);
  });

  it("reads an integer within its bounds", () => {
    expect(integerSetting({ X_SIZE: "100" }, "X_SIZE", spec)).toBe(100);
  });

  it.each(["0", "101", "1.5", "ten", " "])("refuses %j naming the variable and its bounds", (bad) => {
    expect(() => integerSetting({ X_SIZE: bad }, "X_SIZE", spec)).toThrow(
      new ConfigError(`X_SIZE must be an integer in 1..100, got "${bad}"`),
    );
  });

  it("is undefined when optional and unset", () => {
    expect(optionalIntegerSetting({}, "X_SIZE", spec)).toBeUndefined();
    expect(optionalIntegerSetting({ X_SIZE: "3" }, "X_SIZE", spec)).toBe(3);
  });
});

describe("fractionSetting", () => {
  it("reads 0..1 and refuses anything else", () => {
    expect(fractionSetting({}, "X_RATIO", 0.5)).toBe(0.5);
    expect(fractionSetting({ X_RATIO: "0.25" }, "X_RATIO", 0.5)).toBe(0.25);
    expect(() => fractionSetting({ X_RATIO: "1.5" }, "X_RATIO", 0.5, "a ratio")).toThrow(
      'X_RATIO must be a ratio in 0..1, got "1.5"',
    );
  });
});

describe("enumSetting", () => {
  it("reads one of the values, or the fallback when unset", () => {
    expect(enumSetting({}, "X_MODE", ["a", "b", "c"], "b")).toBe("b");
    expect(enumSetting({ X_MODE: "c" }, "X_MODE", ["a", "b", "c"], "b")).toBe("c");
  });

  it("names every accepted value", () => {
    expect(() => enumSetting({ X_MODE: "d" }, "X_MODE", ["a", "b", "c"], "a")).toThrow(
      'X_MODE must be "a", "b" or "c", got "d"',
    );
  });
});

describe("booleanSetting and switchSetting", () => {
  it("reads true/false with a default", () => {
    expect(booleanSetting({}, "X_SEED", true)).toBe(true);
    expect(booleanSetting({ X_SEED: "false" }, "X_SEED", true)).toBe(false);
    expect(() => booleanSetting({ X_SEED: "no" }, "X_SEED", true)).toThrow(
      'X_SEED must be "true" or "false", got "no"',
    );
  });

  it("reads on/off, off when unset", () => {
    expect(switchSetting({}, "X_GLASS")).toBe(false);
    expect(switchSetting({ X_GLASS: "on" }, "X_GLASS")).toBe(true);
    expect(() => switchSetting({ X_GLASS: "yes" }, "X_GLASS")).toThrow('X_GLASS must be "on" or "off", got "yes"');
  });
});
