import { REDACTED, redactText } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import type { Decision } from "../policies/policy.js";
import { ToolRegistry } from "../tool-registry.js";
import {
  ARGUMENTS_QUOTE_CHARS,
  boundDecision,
  boundText,
  cutText,
  MAX_ANSWER_CHARS,
  MAX_TOOL_NAME_CHARS,
} from "./model-bounds.js";

const registry = new ToolRegistry();
const usage = { input: 1, output: 1 };
const calls = (...list: { id: string; name: string; arguments: string }[]): Decision => ({
  kind: "tool_calls",
  calls: list,
  usage,
  promptHash: "",
});

describe("cutText", () => {
  it("never leaves the beginning of a number the redactor would no longer recognise", () => {
    for (const number of ["13800138000", "138 0013 8000", "110101-19800312-1232", "１３８００１３８０００"]) {
      const text = `${"a".repeat(95)} ${number} and more`;
      for (let max = 96; max < 96 + number.length; max += 1) {
        const kept = cutText(text, max);
        expect(kept.length).toBeLessThanOrEqual(max);
        expect(redactText(`${kept} `)).not.toMatch(/[0-9０-９]/);
      }
    }
  });

  it("keeps a number the cut does not split, and never splits a surrogate pair", () => {
    expect(redactText(cutText("call 13800138000 now", 17))).toBe(`call ${REDACTED} `);
    expect(cutText("ab😀", 3)).toBe("ab");
  });
});

describe("boundDecision", () => {
  it("cuts a long answer with a note saying how much was cut", () => {
    const answer = "x".repeat(MAX_ANSWER_CHARS + 5000);
    const bounded = boundDecision({ kind: "final", answer, usage, promptHash: "" }, registry, [], 1);
    expect(bounded.kind === "final" && bounded.answer).toBe(
      `${"x".repeat(MAX_ANSWER_CHARS)}… [the host cut 5000 more characters]`,
    );
    expect(boundText("short", 10)).toBe("short");
  });

  it("replaces a tool-call id that is too long, malformed, already taken or personal data by one the host makes", () => {
    const bounded = boundDecision(
      calls(
        { id: "x".repeat(10_000), name: "kb_search_search", arguments: "{}" },
        { id: "call 1", name: "kb_search_search", arguments: "{}" },
        { id: "seen", name: "kb_search_search", arguments: "{}" },
        { id: "13800138000", name: "kb_search_search", arguments: "{}" },
        { id: "call_abc-1", name: "kb_search_search", arguments: "{}" },
      ),
      registry,
      [{ kind: "call", callId: "seen", tool: "kb_search_search", arguments: "{}" }],
      3,
    );
    expect(bounded.kind === "tool_calls" && bounded.calls.map((c) => c.id)).toEqual([
      "call_3_0",
      "call_3_1",
      "call_3_2",
      "call_3_3",
      "call_abc-1",
    ]);
  });

  it("keeps only the beginning of arguments larger than the tool accepts, and of a long unknown tool name", () => {
    const big = JSON.stringify({ query: "9".repeat(5_000_000) });
    const bounded = boundDecision(
      calls(
        { id: "a", name: "kb_search_search", arguments: big },
        { id: "b", name: "n".repeat(10_000), arguments: "{}" },
      ),
      registry,
      [],
      1,
    );
    if (bounded.kind !== "tool_calls") throw new Error("expected calls");
    expect(bounded.calls[0]).toEqual({
      id: "a",
      name: "kb_search_search",
      arguments: big.slice(0, ARGUMENTS_QUOTE_CHARS),
      argumentsBytes: big.length,
    });
    expect(bounded.calls[1]!.name).toBe(`${"n".repeat(MAX_TOOL_NAME_CHARS)}…`);
  });

  it("leaves a decision within every bound as it is", () => {
    const decision = calls({ id: "call_1_0", name: "kb_search_search", arguments: '{"query":"refunds"}' });
    expect(boundDecision(decision, registry, [], 1)).toEqual(decision);
  });
});
