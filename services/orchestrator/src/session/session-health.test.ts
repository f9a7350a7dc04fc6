import { describe, expect, it } from "vitest";
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";
import type { SessionRecord } from "../store/session-store.js";
import { HEALTH_CAP, healthScore } from "./session-health.js";

/** A session that used 1 of its 10 steps on one kb-search call, answered as `servedFrom` says; still running unless `ended` says how it ended. */
function answeredFrom(
  servedFrom: ResultEnvelope["servedFrom"],
  latencyMs: number,
  ended?: { state: string; stopReason: string; outcome?: string },
): SessionRecord {
  const seen: HistoryItem = {
    kind: "observation",
    callId: "c1",
    tool: "kb_search_search",
    envelope: { ok: true, data: {}, refs: [], costMicros: 0, servedFrom, observedAt: "2026-12-01T00:00:00Z" },
    latencyMs,
  };
  return {
    state: ended?.state ?? "THINKING",
    stopReason: ended?.stopReason ?? null,
    context: {
      history: [{ kind: "call", callId: "c1", tool: "kb_search_search", arguments: "{}" }, seen],
      ...(ended?.outcome ? { outcome: { kind: ended.outcome, reason: "" } } : {}),
    },
    usage: { steps: 1 },
    budget: { maxSteps: 10 },
  } as unknown as SessionRecord;
}

describe("healthScore", () => {
  it("a session answered live and fast scores healthy", () => {
    expect(healthScore(answeredFrom("live", 40))).toBe(97);
  });

  it("a session whose only answer was the degraded stand-in (the tool down throughout) does not score healthy", () => {
    // As a failed call: 100 × (1 − 0.3 × 0.1 − 0.5 × 1); its recorded 0 ms is no latency.
    expect(healthScore(answeredFrom("degraded", 0))).toBe(47);
  });

  it("a cached answer counts half against the score: real data, but the tool was down", () => {
    expect(healthScore(answeredFrom("cache", 40))).toBe(72);
  });

  it("a session that ended with what was asked for keeps its score", () => {
    expect(healthScore(answeredFrom("live", 40, { state: "DONE", stopReason: "done", outcome: "succeeded" }))).toBe(97);
  });

  it("a session that FAILED at its deadline without a single tool answer scores low, however few steps it used", () => {
    const failed = {
      state: "FAILED",
      stopReason: "deadline",
      context: { history: [] },
      usage: { steps: 1 },
      budget: { maxSteps: 10 },
    } as unknown as SessionRecord;
    expect(healthScore(failed)).toBe(HEALTH_CAP.notDone);
  });

  it("a session that ended without its answer, or without doing its task, scores at most the not-done cap", () => {
    for (const ended of [
      { state: "FAILED", stopReason: "tool_unavailable" },
      { state: "CANCELLED", stopReason: "cancelled" },
      { state: "DONE", stopReason: "done", outcome: "not_done" },
    ])
      expect(healthScore(answeredFrom("live", 40, ended)), JSON.stringify(ended)).toBe(HEALTH_CAP.notDone);
  });

  it("a session that got the user only part of what was asked (a partial outcome) scores at most the partial cap", () => {
    const partial = { state: "DONE", stopReason: "done", outcome: "partial" };
    expect(healthScore(answeredFrom("live", 40, partial))).toBe(HEALTH_CAP.partial);
    expect(healthScore(answeredFrom("degraded", 0, partial))).toBe(47);
  });
});
