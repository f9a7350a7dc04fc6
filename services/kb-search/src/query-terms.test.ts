import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_QUERY_TERMS, queryTerms, toMatchExpression } from "./query-terms.js";

describe("toMatchExpression", () => {
  it("quotes each word and joins the words with OR", () => {
    expect(toMatchExpression("refund policy")).toBe('"refund" OR "policy"');
  });

  it("drops FTS5 operator characters, so column filters, prefixes and groups become plain words", () => {
    expect(toMatchExpression('title:refund* (late -"lost")^ {x}+')).toBe(
      '"title" OR "refund" OR "late" OR "lost" OR "x"',
    );
  });

  it("keeps FTS5 keywords only as quoted words, which match literally", () => {
    expect(toMatchExpression("NEAR(x y) AND NOT z")).toBe('"NEAR" OR "x" OR "y" OR "z"');
    expect(toMatchExpression("AND OR NOT")).toBe('"AND" OR "OR" OR "NOT"');
  });

  it("returns undefined for text without words", () => {
    expect(toMatchExpression('?!"*^:()-+.,;')).toBeUndefined();
    expect(toMatchExpression("   \n\t")).toBeUndefined();
    expect(toMatchExpression("")).toBeUndefined();
  });

  it("always yields a list of non-empty quoted words without inner quotes", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 600 }), (text) => {
        const expression = toMatchExpression(text);
        if (expression !== undefined) expect(expression).toMatch(/^"[^"]+"( OR "[^"]+")*$/u);
      }),
      { numRuns: 1000 },
    );
  });
});

describe("queryTerms", () => {
  it("keeps words of any script, with their combining marks", () => {
    expect(queryTerms("退款 politique de remboursement, cafe\u0301")).toEqual([
      "退款",
      "politique",
      "de",
      "remboursement",
      "cafe\u0301",
    ]);
  });

  it("drops repeated words, ignoring case", () => {
    expect(queryTerms("Refund refund REFUND policy")).toEqual(["Refund", "policy"]);
  });

  it("leaves out stop words, unless there is nothing else", () => {
    expect(queryTerms("How do I get a refund for my order?")).toEqual(["refund", "order"]);
    expect(queryTerms("Is it?")).toEqual(["Is", "it"]);
  });

  it(`keeps at most ${MAX_QUERY_TERMS} words`, () => {
    const words = Array.from({ length: MAX_QUERY_TERMS + 10 }, (_, i) => `w${i}`);
    expect(queryTerms(words.join(" "))).toEqual(words.slice(0, MAX_QUERY_TERMS));
  });
});
