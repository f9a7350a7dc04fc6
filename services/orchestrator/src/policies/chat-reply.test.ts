import { describe, expect, it } from "vitest";
import { argumentsJson } from "../guard/tool-arguments.js";
import { MAX_ARGUMENTS_DEPTH } from "../session/model-bounds.js";
import { toDecision } from "./chat-reply.js";
import type { PolicyInput } from "./policy.js";

const INPUT: PolicyInput = { goal: "g", task: {}, tools: [], history: [], step: 3 };

const reply = (message: Record<string, unknown>, usage?: Record<string, unknown>) => ({
  choices: [{ message }],
  ...(usage ? { usage } : {}),
});

describe("toDecision", () => {
  it("turns tool calls into requests with the model's arguments as written", () => {
    const body = reply({ tool_calls: [{ id: "call_a", function: { name: "kb_search", arguments: '{"query":"x"}' } }] });
    const decision = toDecision(body, INPUT, "hash");
    expect(decision).toMatchObject({
      kind: "tool_calls",
      calls: [{ id: "call_a", name: "kb_search", arguments: '{"query":"x"}' }],
      promptHash: "hash",
    });
  });

  it("gives a call without an id, or with one the session already used, a fresh unique id", () => {
    const input: PolicyInput = {
      ...INPUT,
      history: [{ kind: "call", callId: "call_0", tool: "kb_search", arguments: "{}" }],
    };
    const body = reply({
      tool_calls: [{ id: "call_0", function: { name: "a" } }, { function: { name: "b", arguments: { q: 1 } } }],
    });
    const decision = toDecision(body, input, "h");
    if (decision.kind !== "tool_calls") throw new Error("expected tool calls");
    expect(decision.calls.map((c) => c.id)).toEqual(["call_3_0", "call_3_1"]);
    expect(decision.calls.map((c) => c.arguments)).toEqual(["{}", '{"q":1}']);
  });

  it("reads the deprecated single function_call", () => {
    const decision = toDecision(reply({ function_call: { name: "risk", arguments: "{}" } }), INPUT, "h");
    expect(decision).toMatchObject({ kind: "tool_calls", calls: [{ id: "call_3_0", name: "risk" }] });
  });

  it("makes a reply without tool calls the final answer, with its token usage", () => {
    const decision = toDecision(
      reply({ content: [{ text: "Five " }, { text: "days." }] }, { prompt_tokens: 12, completion_tokens: 4.7 }),
      INPUT,
      "h",
    );
    expect(decision).toMatchObject({ kind: "final", answer: "Five days.", usage: { input: 12, output: 4 } });
  });

  it("counts a usage it cannot read as zero", () => {
    const decision = toDecision(reply({ content: "ok" }, { prompt_tokens: -1, completion_tokens: "9" }), INPUT, "h");
    expect(decision.usage).toEqual({ input: 0, output: 0 });
  });

  it("reads arguments sent as an object nested 50,000 deep, as arguments the host refuses for their depth", () => {
    let deep: unknown = [];
    for (let i = 1; i < 50_000; i++) deep = [deep];
    const body = reply({
      tool_calls: [{ id: "call_a", function: { name: "kb_search", arguments: { query: "x", deep } } }],
    });
    const decision = toDecision(body, INPUT, "h");
    if (decision.kind !== "tool_calls") throw new Error("expected tool calls");
    const read = argumentsJson(decision.calls[0]!.arguments);
    expect(read).toMatchObject({
      ok: false,
      code: "EINVAL",
      message: `arguments nested deeper than ${MAX_ARGUMENTS_DEPTH}`,
    });
    expect(decision.calls[0]!.arguments.startsWith('{"query":"x","deep":[[[')).toBe(true);
  });

  it("refuses a body that is not a chat completion, as retryable, its prompt read", () => {
    for (const body of [{ choices: [] }, "not json", { choices: [{ message: "text" }] }])
      expect(() => toDecision(body, INPUT, "h")).toThrow(
        expect.objectContaining({ name: "PolicyUnavailableError", retryable: true, promptRead: true }),
      );
  });

  it("keeps the usage such a body reports, for the host to charge", () => {
    const body = { choices: [], usage: { prompt_tokens: 900, completion_tokens: 3 } };
    expect(() => toDecision(body, INPUT, "h")).toThrow(expect.objectContaining({ usage: { input: 900, output: 3 } }));
  });
});
