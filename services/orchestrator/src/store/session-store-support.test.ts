import { describe, expect, it } from "vitest";
import { SESSION_STATES } from "../session/session-state.js";
import { emptyCounts } from "./session-store-support.js";

describe("emptyCounts", () => {
  it("holds every state of the machine, in its order, at zero", () => {
    const counts = emptyCounts();
    expect(Object.keys(counts)).toEqual([...SESSION_STATES]);
    expect(new Set(Object.values(counts))).toEqual(new Set([0]));
  });
});
