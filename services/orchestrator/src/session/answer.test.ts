import { describe, expect, it } from "vitest";
import type { HistoryItem } from "../policies/policy.js";
import { ToolRegistry } from "../tool-registry.js";
import { checkAnswer as checkWith } from "./answer.js";

/** The citations the shipped contracts declare: billing's refund ids, kb-search's documents at a version. */
const citations = new ToolRegistry().citations;
const checkAnswer = (answer: string, history: readonly HistoryItem[]) => checkWith(answer, history, citations);

const observed: HistoryItem[] = [
  {
    kind: "observation",
    callId: "c1",
    tool: "billing_refund",
    envelope: {
      ok: true,
      data: { refund: { refundId: "rf_AAAAAAAAAAAAAAAA" } },
      refs: ["refund:rf_AAAAAAAAAAAAAAAA"],
      costMicros: 0,
      servedFrom: "live",
      observedAt: "",
    },
  },
  {
    kind: "observation",
    callId: "c2",
    tool: "kb_search_search",
    envelope: { ok: true, data: {}, refs: ["kb:refund-policy@3"], costMicros: 0, servedFrom: "live", observedAt: "" },
  },
];

describe("checkAnswer", () => {
  it("accepts an answer citing only what was observed", () => {
    expect(checkAnswer("Refunded: rf_AAAAAAAAAAAAAAAA, per [refund-policy@3].", observed)).toBeUndefined();
  });

  it("rejects an empty answer", () => {
    expect(checkAnswer("  ", observed)).toBe("the answer is empty");
  });

  it("rejects a refund id no tool returned", () => {
    expect(checkAnswer("Refunded: rf_BBBBBBBBBBBBBBBB.", observed)).toBe(
      "the answer cites refund rf_BBBBBBBBBBBBBBBB, which no tool returned",
    );
  });

  it("rejects a document version no search returned", () => {
    expect(checkAnswer("See [refund-policy@2] and [refund-policy@3].", observed)).toBe(
      "the answer cites refund-policy@2, which no tool returned",
    );
  });

  it("does not count a call the model made as observed", () => {
    expect(
      checkAnswer("Refunded: rf_CCCCCCCCCCCCCCCC.", [
        { kind: "call", callId: "c3", tool: "billing_refund", arguments: "rf_CCCCCCCCCCCCCCCC" },
      ]),
    ).toMatch(/rf_CCCCCCCCCCCCCCCC/);
  });

  it("does not count the model's own words quoted back in a refusal or a note as returned", () => {
    const refused: HistoryItem[] = [
      { kind: "call", callId: "c4", tool: "rf_DDDDDDDDDDDDDDDD", arguments: "{}" },
      {
        kind: "observation",
        callId: "c4",
        tool: "rf_DDDDDDDDDDDDDDDD",
        envelope: {
          ok: false,
          error: {
            code: "ENOTOOL",
            message: 'no tool named "rf_DDDDDDDDDDDDDDDD" [refund-policy@9] kb:refund-policy@9',
            retryable: false,
            suggestedAction: "",
          },
          refs: [],
          costMicros: 0,
          servedFrom: "none",
          observedAt: "",
        },
      },
      {
        kind: "observation",
        callId: "c5",
        tool: "kb_search_search",
        envelope: {
          ok: true,
          data: {},
          refs: [],
          costMicros: 0,
          servedFrom: "degraded",
          observedAt: "",
          note: "kb-search said: rf_EEEEEEEEEEEEEEEE kb:refund-policy@8",
        },
      },
    ];
    expect(checkAnswer("Refunded: rf_DDDDDDDDDDDDDDDD.", refused)).toMatch(/cites refund rf_DDDDDDDDDDDDDDDD/);
    expect(checkAnswer("Refunded: rf_EEEEEEEEEEEEEEEE.", refused)).toMatch(/cites refund rf_EEEEEEEEEEEEEEEE/);
    expect(checkAnswer("See [refund-policy@9].", refused)).toMatch(/cites refund-policy@9/);
    expect(checkAnswer("See [refund-policy@8].", refused)).toMatch(/cites refund-policy@8/);
  });

  it("compares ids whole: one cut short of an id that was returned is not it", () => {
    expect(checkAnswer("Refunded: rf_AAAAAAAA.", observed)).toBe(
      "the answer cites refund rf_AAAAAAAA, which no tool returned",
    );
    const later: HistoryItem[] = [
      {
        kind: "observation",
        callId: "c6",
        tool: "kb_search_search",
        envelope: {
          ok: true,
          data: {},
          refs: ["kb:refund-policy@31"],
          costMicros: 0,
          servedFrom: "live",
          observedAt: "",
        },
      },
    ];
    expect(checkAnswer("See [refund-policy@3].", later)).toBe(
      "the answer cites refund-policy@3, which no tool returned",
    );
    expect(checkAnswer("See [refund-policy@31].", later)).toBeUndefined();
  });
});
