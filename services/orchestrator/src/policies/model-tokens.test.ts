import { describe, expect, it } from "vitest";
import { estimateTokens } from "../guard/budget.js";
import { encodingForModel, tokenCounter } from "./model-tokens.js";
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
