import { describe, expect, it } from "vitest";
import { errorOf, refusal } from "./errors.js";

class Refused extends Error {}

describe("errorOf", () => {
  it("returns what the call rejected with", async () => {
    expect(await errorOf(Promise.reject(new Refused("no")))).toBeInstanceOf(Refused);
  });

  it("fails when the call answers", async () => {
    await expect(errorOf(Promise.resolve(1))).rejects.toThrow(/answered/);
  });
});

describe("refusal", () => {
  it("returns the error of the expected type", async () => {
    const error = await refusal(Promise.reject(new Refused("no")), Refused);
    expect(error.message).toBe("no");
  });

  it("fails on an error of another type, keeping it as the cause", async () => {
    const other = new TypeError("broken");
    await expect(refusal(Promise.reject(other), Refused)).rejects.toMatchObject({
      message: expect.stringMatching(/expected a Refused, got TypeError: broken/),
      cause: other,
    });
  });
});
