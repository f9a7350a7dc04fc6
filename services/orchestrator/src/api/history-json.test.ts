import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { estimateTokens } from "../guard/budget.js";
import { hashHistory, historyJsonLength } from "./history-json.js";
import type { HistoryItem } from "../policies/policy.js";
import { ScriptedPolicy } from "../policies/scripted-policy.js";

const observation = (n: number): HistoryItem =>
  ({
    kind: "observation",
    callId: `call_${n}`,
    tool: "kb_search_search",
    envelope: {
      ok: true,
      data: { hits: [{ docId: "refund-policy", version: 1, title: 'Refunds "quoted" ü' }] },
      refs: [],
      costMicros: 0,
      servedFrom: "live",
      observedAt: "2026-11-30T00:00:00.000Z",
    },
  }) as HistoryItem;
const histories: HistoryItem[][] = [
  [],
  [observation(1)],
  [
    { kind: "call", callId: "call_1", tool: "kb_search_search", arguments: "{}" } as HistoryItem,
    observation(1),
    observation(2),
  ],
];

describe("history JSON from cached item texts", () => {
  it("gives the length and the sha256 of JSON.stringify(history), for any history", () => {
    for (const history of histories) {
      const text = JSON.stringify(history);
      expect(historyJsonLength(history)).toBe(text.length);
      expect(hashHistory(createHash("sha256"), history).digest("hex")).toBe(
        createHash("sha256").update(text).digest("hex"),
      );
    }
  });

  it("the scripted policy's prompt hash and token count are those of its whole prompt", async () => {
    for (const history of histories) {
      const input = {
        goal: "how do refunds work",
        task: { kind: "question", subgoals: ["a", "b", "c"] },
        tools: [],
        history,
        step: history.length + 1,
      };
      const prompt = JSON.stringify({ goal: input.goal, task: input.task, history });
      const decision = await new ScriptedPolicy().decide(input);
      expect(decision.promptHash).toBe(createHash("sha256").update(prompt).digest("hex"));
      expect(decision.usage.input).toBe(estimateTokens(prompt));
    }
  });
});
