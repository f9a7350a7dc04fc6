import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { governContext, isSummary } from "./context-governance.js";
import { tokenCounter } from "../policies/model-tokens.js";
import type { HistoryItem, ResultEnvelope } from "../policies/policy.js";

const counter = tokenCounter("o200k_base");
const task = { kind: "question", order_id: "ord_123" };
const prompt = (history: HistoryItem[]) => ({ goal: "find the refund policy", task, tools: [], history });
const limits = { compressAboveTokens: 1000, windowTokens: 100_000, keepRecent: 2, maxOutputTokens: 100 };

/** Words, not one repeated letter: BPE packs "xxxx…" into very few tokens. */
function words(n: number, seed: number): string {
  return Array.from({ length: n }, (_, i) => `word${(i * 7919 + seed) % 1000}`).join(" ");
}

function observation(i: number, size: number, tool = "kb_search_search"): HistoryItem {
  return {
    kind: "observation",
    callId: `c${i}`,
    tool,
    envelope: {
      ok: true,
      data: { text: words(size, i) },
      refs: [`kb:doc-${i}@1`],
      costMicros: 100,
      servedFrom: "cache",
      observedAt: "2026-11-29T00:00:00Z",
      ageMs: 5,
    },
  };
}

function envelopeOf(item: HistoryItem | undefined): ResultEnvelope {
  if (item?.kind !== "observation") throw new Error("not an observation");
  return item.envelope;
}

describe("governContext", () => {
  it("leaves a small prompt alone", () => {
    const history = [observation(1, 10), observation(2, 10)];
    const g = governContext(prompt(history), limits, counter, 100_000);
    expect(g.history).toEqual(history);
    expect(g.compressed).toBe(0);
    expect(g.tokens).toBe(g.tokensBefore);
    expect(g.fits).toBe(true);
  });

  it("summarises old observations past the threshold, keeping refs, provenance and a hash of the payload", () => {
    const history = Array.from({ length: 6 }, (_, i) => observation(i, 400));
    const g = governContext(prompt(history), limits, counter, 100_000);
    // six observations of one tool, two kept as recent: the four older ones are summarised
    expect(g.compressed).toBe(4);
    const first = envelopeOf(g.history[0]);
    const original = envelopeOf(history[0]);
    expect(first).toMatchObject({
      ok: true,
      refs: ["kb:doc-0@1"],
      servedFrom: "cache",
      observedAt: "2026-11-29T00:00:00Z",
      ageMs: 5,
    });
    const dropped = JSON.stringify({ data: original.data, note: null, error: null });
    expect(first.data).toEqual({
      compressed: true,
      sha256: createHash("sha256").update(dropped).digest("hex"),
      bytes: Buffer.byteLength(dropped),
    });
    expect(g.history[5]).toEqual(history[5]);
    expect(g.tokens).toBeLessThan(g.tokensBefore / 2);
  });

  it("never touches the latest observation of a tool, rejected answers or the task", () => {
    const order = observation(9, 400, "billing_get_order");
    const rejected: HistoryItem = {
      kind: "rejected_answer",
      text: words(300, 1),
      why: "the answer cites rf_x, which no tool returned",
    };
    const history = [order, rejected, ...Array.from({ length: 5 }, (_, i) => observation(i, 400))];
    const g = governContext(prompt(history), { ...limits, keepRecent: 1 }, counter, 100_000);
    expect(g.history[0]).toEqual(order);
    expect(g.history[1]).toEqual(rejected);
    expect(g.compressed).toBe(4);
  });

  it("compresses harder, down to the latest result of each tool, when the reply would not fit", () => {
    const history = Array.from({ length: 4 }, (_, i) => observation(i, 400));
    const full = governContext(prompt(history), { ...limits, compressAboveTokens: 1_000_000 }, counter, 1_000_000);
    // Below the threshold, but the window leaves no room for the reply unless all but one are summarised.
    const g = governContext(
      prompt(history),
      { ...limits, compressAboveTokens: 1_000_000, windowTokens: full.tokens - 2000 },
      counter,
      1_000_000,
    );
    expect(g.fits).toBe(true);
    expect(g.compressed).toBe(3);
    expect(isSummary(envelopeOf(g.history[2]).data)).toBe(true);
    expect(isSummary(envelopeOf(g.history[3]).data)).toBe(false);
  });

  it("does not fit when even the hardest compression leaves no room for the reply in the budget left", () => {
    const g = governContext(prompt([observation(1, 2000)]), limits, counter, 1500);
    expect(g.fits).toBe(false);
    expect(g.ceiling).toBe(1400);
  });

  it("raises the alarm at 80% of the window", () => {
    const g = governContext(
      prompt([observation(1, 1000)]),
      { ...limits, windowTokens: 2000, compressAboveTokens: 100_000 },
      counter,
      100_000,
    );
    expect(g.tokens).toBeGreaterThanOrEqual(1600);
    expect(g.alarm).toBe(true);
  });
});
