import { describe, expect, it } from "vitest";
import { DEFAULT_BUDGET } from "../guard/budget.js";
import { initialUsage } from "../store/session-store-support.js";
import type { SessionRecord } from "../store/session-store.js";
import { toProtoSession, wallClockUsed } from "./session-message.js";

/** Ten minutes: how far ahead of this process's clock the store's clock is taken to be. */
const AHEAD_MS = 10 * 60_000;

function record(startedAt: number, ended: { at: number } | null = null): SessionRecord {
  return {
    id: "ses_1",
    state: ended ? "DONE" : "THINKING",
    version: 1,
    goal: "g",
    task: {},
    budget: DEFAULT_BUDGET,
    usage: initialUsage(startedAt),
    context: {},
    pending: null,
    scopes: [],
    policy: "scripted",
    stopReason: ended ? "done" : null,
    answer: null,
    createdAt: startedAt,
    updatedAt: ended?.at ?? startedAt,
    leaseOwner: null,
    leaseExpiresAt: null,
    idempotencyKey: null,
    createdBy: "t",
    requestHash: null,
  };
}

describe("toProtoSession", () => {
  it("shows a live session's wall clock on the clock it is given (the store's, as the budget counts it), not this process's", () => {
    const startedAt = Date.now() + AHEAD_MS;
    const shown = toProtoSession(record(startedAt), { now: startedAt + 90_000 });
    expect(shown.usage?.wallClockMs).toBe(90_000);
  });

  it("shows an ended session's wall clock until it ended, whatever the time now", () => {
    const ended = record(1_000, { at: 31_000 });
    expect(toProtoSession(ended, { now: 10_000_000 }).usage?.wallClockMs).toBe(30_000);
    expect(wallClockUsed(ended, 10_000_000)).toBe(30_000);
  });

  it("shows a start later than the clock it is given as none used, never a negative time", () => {
    expect(toProtoSession(record(50_000), { now: 40_000 }).usage?.wallClockMs).toBe(0);
  });
});
