import { describe, expect, it } from "vitest";
import { SESSION_STATES } from "../session/session-state.js";
import { decodeCursor, emptyCounts, encodeCursor } from "./session-store-support.js";

describe("emptyCounts", () => {
  it("holds every state of the machine, in its order, at zero", () => {
    const counts = emptyCounts();
    expect(Object.keys(counts)).toEqual([...SESSION_STATES]);
    expect(new Set(Object.values(counts))).toEqual(new Set([0]));
  });
});

describe("list cursors", () => {
  it("decode what they encode, and refuse a time no store column holds", () => {
    expect(decodeCursor(encodeCursor({ createdAt: 1_733_000_000_000, id: "ses_a" }))).toEqual({
      createdAt: 1_733_000_000_000,
      id: "ses_a",
    });
    const forged = (json: string) => Buffer.from(json).toString("base64url");
    for (const time of ["1e400", "-1", "1.5", '"1"'])
      expect(() => decodeCursor(forged(`[${time},"ses_a"]`))).toThrow(new RangeError("invalid list cursor"));
  });
});
