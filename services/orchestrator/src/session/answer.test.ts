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
});
