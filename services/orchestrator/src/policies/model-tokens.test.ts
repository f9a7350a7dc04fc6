import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { estimateTokens } from "../guard/budget.js";
import { ENCODINGS, encodingForModel, tokenCounter } from "./model-tokens.js";
import { toChatMessages } from "./chat-request.js";

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

/** A small seeded generator, so a failure names a text that can be made again. */
function seeded(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return x / 2_147_483_648;
  };
}

/** Fragments that sit around the seams where a text is cut: punctuation runs, contractions, digits, spaces, non-ASCII. */
const FRAGMENTS = [
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
];

function randomText(next: () => number, length: number): string {
  let text = "";
  while (text.length < length) text += FRAGMENTS[Math.floor(next() * FRAGMENTS.length)];
  return text;
}

function randomValue(next: () => number, depth: number): unknown {
  const pick = next();
  if (depth > 3 || pick < 0.3) return randomText(next, Math.floor(next() * 40));
  if (pick < 0.4) return Math.floor(next() * 1e9) / (next() < 0.5 ? 1 : 1000);
  if (pick < 0.45) return next() < 0.5;
  if (pick < 0.65) return Array.from({ length: Math.floor(next() * 4) }, () => randomValue(next, depth + 1));
  const keys = ["ok", "data", "hits", "docId", "title", "snippet", "observedAt", "_id", "9lives", "Émile", "a b"];
  return Object.fromEntries(
    Array.from({ length: 1 + Math.floor(next() * 5) }, () => [
      keys[Math.floor(next() * keys.length)],
      randomValue(next, depth + 1),
    ]),
  );
}

describe("tokenCounter, long texts counted in pieces", () => {
  it("gives every long text exactly the count the encoding gives it whole", () => {
    for (const encoding of ENCODINGS) {
      const whole = wholeCount(encoding);
      const next = seeded(ENCODINGS.indexOf(encoding) + 7);
      for (let i = 0; i < 400; i++) {
        // A fresh counter each time, so nothing comes from an earlier text's cache.
        const counter = tokenCounter(encoding);
        const text =
          i % 2 === 0
            ? JSON.stringify({ ok: true, data: randomValue(next, 0), observedAt: new Date(1e12 + i).toISOString() })
            : randomText(next, 256 + Math.floor(next() * 600));
        expect(counter.text(text), `${encoding} #${i}: ${text}`).toBe(whole(text));
      }
    }
  });

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
