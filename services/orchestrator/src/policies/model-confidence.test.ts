import { describe, expect, it } from "vitest";
import { parseActionConfidence, parseFinalReply } from "./model-confidence.js";

describe("parseFinalReply", () => {
  it("reads the answer, confidence and reason from the JSON object, also inside a Markdown fence", () => {
    const reply = {
      answer: "Cables are covered [warranty@2].",
      confidence: 0.85,
      uncertainty_reason: "one document only",
    };
    expect(parseFinalReply(JSON.stringify(reply))).toEqual({
      answer: reply.answer,
      confidence: 0.85,
      uncertaintyReason: "one document only",
    });
    expect(parseFinalReply(`\`\`\`json\n${JSON.stringify(reply)}\n\`\`\``)).toEqual({
      answer: reply.answer,
      confidence: 0.85,
      uncertaintyReason: "one document only",
    });
  });

  it("clamps a confidence out of range and takes 1..100 as percent", () => {
    expect(parseFinalReply('{"answer":"a","confidence":7.5}').confidence).toBe(0.075);
    expect(parseFinalReply('{"answer":"a","confidence":-1}').confidence).toBe(0);
  });

  it("takes plain text as the answer with no confidence: 0, model gave no confidence", () => {
    expect(parseFinalReply("Cables are covered.")).toEqual({
      answer: "Cables are covered.",
      confidence: 0,
      uncertaintyReason: "model gave no confidence",
    });
  });

  it("counts a missing or invalid confidence as 0, model gave no confidence, and keeps the answer", () => {
    expect(parseFinalReply('{"answer":"a"}')).toEqual({
      answer: "a",
      confidence: 0,
      uncertaintyReason: "model gave no confidence",
    });
    expect(parseFinalReply('{"answer":"a","confidence":"very","uncertainty_reason":"x"}')).toEqual({
      answer: "a",
      confidence: 0,
      uncertaintyReason: "model gave no confidence",
    });
  });

  it("keeps a JSON object that is not the answer shape as the answer text", () => {
    expect(parseFinalReply('{"refund":"done"}').answer).toBe('{"refund":"done"}');
    expect(parseFinalReply("{not json").answer).toBe("{not json");
  });
});

describe("parseActionConfidence", () => {
  it("reads a stated confidence beside tool calls", () => {
    expect(parseActionConfidence('{"confidence":0.3,"uncertainty_reason":"the order may be disputed"}')).toEqual({
      confidence: 0.3,
      uncertaintyReason: "the order may be disputed",
    });
  });

  it("is nothing without the object, and 0 when the object states no usable number", () => {
    expect(parseActionConfidence("")).toEqual({});
    expect(parseActionConfidence("Looking up the order.")).toEqual({});
    expect(parseActionConfidence('{"uncertainty_reason":"?"}')).toEqual({
      confidence: 0,
      uncertaintyReason: "model gave no confidence",
    });
  });
});
