import { describe, expect, it } from "vitest";
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";
import type { SessionRecord } from "../store/session-store.js";
import { healthScore } from "./session-health.js";

/** A session that used 1 of its 10 steps on one kb-search call, answered as `servedFrom` says. */
function answeredFrom(servedFrom: ResultEnvelope["servedFrom"], latencyMs: number): SessionRecord {
  const seen: HistoryItem = {
    kind: "observation",
    callId: "c1",
    tool: "kb_search_search",
    envelope: { ok: true, data: {}, refs: [], costMicros: 0, servedFrom, observedAt: "2026-12-01T00:00:00Z" },
    latencyMs,
  };
  return {
    context: { history: [{ kind: "call", callId: "c1", tool: "kb_search_search", arguments: "{}" }, seen] },
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
});
