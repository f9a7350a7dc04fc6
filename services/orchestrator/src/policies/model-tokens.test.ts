import { createRequire } from "node:module";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import fc from "fast-check";
import {
  type ChatCompletionFunctionDefinition,
  type ChatMessage,
  computeChatCompletionTokenCount,
} from "gpt-tokenizer/functionCalling";
import { describe, expect, it } from "vitest";
import { estimateTokens } from "../guard/budget.js";
import { ENCODINGS, encodingForModel, tokenCounter } from "./model-tokens.js";
import { toChatMessages, toChatTool } from "./chat-request.js";
import type { HistoryItem, ToolSpec } from "./policy.js";

describe("encodingForModel", () => {
  it("picks o200k_base for gpt-4o, gpt-4.1, gpt-5 and the o-series, cl100k_base for gpt-4 and gpt-3.5", () => {
    for (const model of [
      "gpt-4o-mini",
      "gpt-4o-2024-08-06",
      "gpt-4.1",
      "gpt-5-mini",
      "o3-mini",
      "o4-mini",
      "openai/gpt-4o",
    ]) {
      expect(encodingForModel(model), model).toBe("o200k_base");
    }
    for (const model of ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"])
      expect(encodingForModel(model), model).toBe("cl100k_base");
  });

  it("falls back to the documented default for an unknown family", () => {
    expect(encodingForModel("llama3.1:8b")).toBe("o200k_base");
  });
});

describe("tokenCounter", () => {
  it("counts text with the encoding's BPE, not four characters a token", () => {
    const o200k = tokenCounter("o200k_base");
    const cl100k = tokenCounter("cl100k_base");
    // Known counts (tiktoken): "hello world" is 2 tokens in both; Chinese differs between the two encodings.
    expect(o200k.text("hello world")).toBe(2);
    expect(cl100k.text("hello world")).toBe(2);
    const chinese = "退款政策适用于所有已支付的订单";
    expect(o200k.text(chinese)).not.toBe(cl100k.text(chinese));
    expect(o200k.text(chinese)).not.toBe(estimateTokens(chinese));
  });

  it("counts the chat request: every message with its overhead, and the tool schemas", () => {
    const counter = tokenCounter("o200k_base");
    const input = { goal: "refund order ord_1", task: { kind: "refund", order_id: "ord_1" }, history: [], tools: [] };
    const messages = toChatMessages(input);
    const contentOnly = messages.reduce((n, m) => n + counter.text(String(m.content)), 0);
    const bare = counter.prompt(input);
    // 3 tokens of framing per message (role included) and 3 priming the reply.
    expect(bare).toBeGreaterThanOrEqual(contentOnly + 3 * messages.length + 3);
    const tool = {
      name: "billing_get_order",
      description: "Looks an order up.",
      parameters: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
    };
    expect(counter.prompt({ ...input, tools: [tool] })).toBeGreaterThan(bare + counter.text("billing_get_order"));
  });
});

/** The encoding's own count of a whole text, not through tokenCounter's pieces and cache. */
function wholeCount(encoding: string): (text: string) => number {
  const require = createRequire(import.meta.url);
  return (require(`gpt-tokenizer/encoding/${encoding}`) as { countTokens: (t: string) => number }).countTokens;
}

/** Fragments that sit around the seams where a text is cut: punctuation runs, contractions, digits, spaces, non-ASCII. */
const fragment = fc.constantFrom(
  '"',
  ',"',
  '{"',
  '":"',
  "'s",
  "'ll",
  " ",
  "  ",
  "\n",
  "\n\n",
  "/",
  "\\",
  '\\"',
  "x",
  "Ab",
  "refs",
  "docId",
  "1234567",
  "é",
  "Ü",
  "退款",
  "🙂",
  "-",
  "[{",
  "}]",
  ":",
  "0",
);

/** A text of at least 260 characters (long enough to be cut) made of those fragments. */
const fragments = fc.array(fragment, { minLength: 260, maxLength: 600 }).map((parts) => parts.join(""));

/** A tool result's envelope as JSON: any data, a long text in it, and its time. */
const envelopeJson = fc
  .tuple(fc.jsonValue({ maxDepth: 3 }), fragments, fc.date({ noInvalidDate: true }))
  .map(([data, snippet, at]) => JSON.stringify({ ok: true, data, snippet, observedAt: at.toISOString() }));

describe("tokenCounter's memory", () => {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  /** Heap kept after counting `n` texts made one at a time (after a full collection), in bytes. */
  const keptBy = (count: (text: string) => number, n: number, text: (i: number) => string): number => {
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 1; i <= n; i += 1) count(text(i));
    gc();
    return process.memoryUsage().heapUsed - before;
  };

  it("keeps a bounded amount of text however many large tool results it counted", () => {
    const counter = tokenCounter("o200k_base");
    // 240 KB a result, its body the same from call to call, only its id differs: 300 of them are 72 MB.
    const body = "refunds to a card take five to ten days ".repeat(6000);
    const result = (i: number) => `{"callId":"c${i}","body":"${body}"}`;
    const expected = counter.text(result(0));
    expect(counter.text(result(1))).toBe(expected);
    expect(keptBy(counter.text, 300, (i) => result(i + 1))).toBeLessThan(16_000_000);
  });

  it("keeps no text alive through a piece cut from it, when the text is too large to keep whole", () => {
    const counter = tokenCounter("o200k_base");
    // 600 KB a result, in 5,000 pieces seen before; its id is a piece of its own: 100 of them are 60 MB.
    const fields = `"word":"${"five to ten days ".repeat(7)}",`.repeat(5000);
    const result = (i: number) => `{"callId":"c${i}",${fields}"end":1}`;
    counter.text(result(0));
    expect(keptBy(counter.text, 100, result)).toBeLessThan(16_000_000);
  });
});

describe("tokenCounter, long texts counted in pieces", () => {
  for (const encoding of ENCODINGS) {
    it(`gives every long text exactly the count ${encoding} gives it whole`, () => {
      const whole = wholeCount(encoding);
      fc.assert(
        fc.property(fc.oneof(envelopeJson, fragments), (text) => {
          // A fresh counter each time, so nothing comes from an earlier text's cache.
          expect(tokenCounter(encoding).text(text)).toBe(whole(text));
        }),
        { numRuns: 300 },
      );
    });
  }

  it("counts a tool result seen before with only its time changed exactly, each time", () => {
    const counter = tokenCounter("o200k_base");
    const whole = wholeCount("o200k_base");
    const hits = Array.from({ length: 3 }, (_, i) => ({
      docId: `kb-${i}`,
      title: `Refunds, part ${i}`,
      snippet: "Card refunds reach the customer in 5-10 business days; approvals above 500 EUR need a second person.",
    }));
    for (let i = 0; i < 20; i++) {
      const text = JSON.stringify({ ok: true, data: { hits }, observedAt: new Date(1e12 + i * 1000).toISOString() });
      expect(counter.text(text)).toBe(whole(text));
    }
  });
});

describe("tokenCounter, a session's prompts", () => {
  const search: ToolSpec = {
    name: "kb_search_search",
    description: "Searches the knowledge base.",
    parameters: {
      type: "object",
      properties: { query: { type: "string", description: "what to look for" }, limit: { type: "integer" } },
      required: ["query"],
    },
  };
  const order: ToolSpec = {
    name: "billing_get_order",
    description: "Looks an order up.",
    parameters: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
  };
  /** A breaker opened on search: a new spec with the time in its description. */
  const searchDown: ToolSpec = { ...search, unavailableUntil: "2026-12-05T04:00:00.000Z" };

  /** gpt-tokenizer's count of the whole request in one call, each text counted whole. */
  function reference(input: { goal: string; task: never; tools: readonly ToolSpec[]; history: HistoryItem[] }): number {
    const whole = wholeCount("o200k_base");
    const messages: ChatMessage[] = toChatMessages(input).flatMap((m) =>
      m.role === "assistant" && m.tool_calls?.length
        ? m.tool_calls.map((c) => ({
            role: "assistant",
            content: "",
            function_call:
              c.type === "function" ? { name: c.function.name, arguments: c.function.arguments } : undefined,
          }))
        : [{ role: m.role, content: typeof m.content === "string" ? m.content : "" }],
    );
    const functions = input.tools.map((t) => toChatTool(t).function as ChatCompletionFunctionDefinition);
    return computeChatCompletionTokenCount({ messages, ...(functions.length > 0 ? { functions } : {}) }, whole);
  }

  const step = fc.tuple(fc.string({ maxLength: 40 }), fc.jsonValue({ maxDepth: 2 }), fc.boolean());
  const toolLists = fc.constantFrom<readonly ToolSpec[]>([], [search], [search, order], [searchDown, order], [order]);

  it("counts each step's prompt exactly as gpt-tokenizer counts the whole request, as tools change between steps", () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 60 }),
        fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
        fc.array(fc.tuple(step, toolLists), { maxLength: 6 }),
        (goal, task, steps) => {
          // One counter and one task object for the whole session, as in a run: what is kept from
          // step to step must never change a count.
          const counter = tokenCounter("o200k_base");
          const history: HistoryItem[] = [];
          for (const [i, [[query, data, rejected], tools]] of steps.entries()) {
            const input = { goal, task: task as never, tools, history: [...history] };
            expect(counter.prompt(input)).toBe(reference(input));
            const callId = `c${i}`;
            history.push({ kind: "call", callId, tool: "kb_search_search", arguments: JSON.stringify({ query }) }, {
              kind: "observation",
              callId,
              tool: "kb_search_search",
              envelope: { ok: true, data: { data }, refs: [], costMicros: 0, servedFrom: "live", observedAt: "x" },
            } as HistoryItem);
            if (rejected) history.push({ kind: "rejected_answer", text: query, why: "no citation" } as HistoryItem);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
