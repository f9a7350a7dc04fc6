import { describe, expect, it } from "vitest";
import { governContext } from "./context-governance.js";
import type { HistoryItem } from "./policy.js";

function observation(i: number, size: number): HistoryItem {
  return {
    kind: "observation",
    callId: `c${i}`,
    tool: "kb_search_search",
    envelope: { ok: true, data: { text: "x".repeat(size) }, refs: [`kb:doc-${i}@1`], costMicros: 100, servedFrom: "live", observedAt: "2026-11-29T00:00:00Z" },
  };
}

describe("governContext", () => {
  it("leaves a small history alone", () => {
    const history = [observation(1, 10), observation(2, 10)];
    const g = governContext(history, { compressAboveTokens: 1000, windowTokens: 100_000, keepRecent: 1 });
    expect(g.history).toEqual(history);
    expect(g.compressed).toBe(0);
  });

  it("compresses old observations past the threshold, keeping outcome and references", () => {
    const history = Array.from({ length: 6 }, (_, i) => observation(i, 2000));
    const g = governContext(history, { compressAboveTokens: 1000, windowTokens: 100_000, keepRecent: 2 });
    // six observations of one tool, two kept as recent: the four older ones are compressed
    expect(g.compressed).toBe(4);
    const first = g.history[0]!;
    expect(first.kind === "observation" && first.envelope.refs).toEqual(["kb:doc-0@1"]);
    expect(first.kind === "observation" && (first.envelope.data as { compressed: boolean }).compressed).toBe(true);
    expect(g.history[5]).toEqual(history[5]);
    expect(g.tokens).toBeLessThan(2000);
  });

  it("never compresses the latest observation of a tool", () => {
    const order: HistoryItem = { ...observation(9, 2000), tool: "billing_get_order" } as HistoryItem;
    const history = [order, ...Array.from({ length: 5 }, (_, i) => observation(i, 2000))];
    const g = governContext(history, { compressAboveTokens: 1000, windowTokens: 100_000, keepRecent: 1 });
    expect(g.history[0]).toEqual(order);
    expect(g.compressed).toBe(4);
  });

  it("raises the alarm at 80% of the window", () => {
    const g = governContext([observation(1, 3300)], { compressAboveTokens: 100_000, windowTokens: 1000, keepRecent: 4 });
    expect(g.alarm).toBe(true);
  });
});
