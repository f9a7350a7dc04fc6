import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type CorpusDocument, loadCorpus, SHIPPED_CORPUS_DIR } from "./corpus.js";
import { IndexUnavailableError, SearchIndex } from "./search-index.js";

describe("ranking over the shipped corpus", () => {
  let index: SearchIndex;
  beforeAll(() => {
    index = SearchIndex.open(":memory:", loadCorpus(SHIPPED_CORPUS_DIR));
  });
  afterAll(() => index.close());

  const top = (query: string) => index.search(query, 10)[0]?.docId;

  it('ranks the refund policy first for "refund"', () => {
    expect(top("refund")).toBe("refund-policy");
    expect(top("refunds")).toBe("refund-policy");
    expect(top("Refund?")).toBe("refund-policy");
  });

  it.each([
    ["partial refund for one item", "partial-refunds"],
    ["how long does a refund take to reach my card", "refund-timelines"],
    ["approval for a high-value refund", "refund-approvals"],
    ["chargeback dispute", "chargebacks"],
    ["verify identity id card", "identity-verification"],
    ["risk score", "risk-policy"],
    ["parcel lost", "delivery-delays"],
    ["forgot password", "password-reset"],
    ["gift card", "gift-cards"],
    ["express shipping cost", "shipping-policy"],
    ["How do I return an item?", "returns-policy"],
  ])("ranks the expected document first for %j", (query, docId) => {
    expect(top(query)).toBe(docId);
  });

  it("returns finite positive scores in descending order, at most `limit` hits", () => {
    for (const limit of [1, 3, 10]) {
      const hits = index.search("refund risk shipping account", limit);
      expect(hits).toHaveLength(limit);
      for (const hit of hits) expect(Number.isFinite(hit.score) && hit.score > 0).toBe(true);
      expect(hits.map((h) => h.score)).toEqual([...hits.map((h) => h.score)].sort((a, b) => b - a));
    }
  });

  it("returns the document's id, version, title, category and a snippet with matches in brackets", () => {
    const [hit] = index.search("chargeback", 1);
    expect(hit).toMatchObject({
      docId: "chargebacks",
      version: 1,
      title: "Chargebacks and payment disputes",
      category: "payments",
    });
    expect(hit?.snippet).toMatch(/\[chargeback\]/i);
    expect(hit?.snippet).not.toMatch(/\n/);
  });

  it("matches word forms and letters without their accents", () => {
    expect(index.search("refunded", 10).map((h) => h.docId)).toContain("refund-policy");
    expect(index.search("réfund", 1)[0]?.docId).toBe("refund-policy");
  });

  it("returns no hits for text without words or with unknown words", () => {
    expect(index.search('?!"*^:()', 10)).toEqual([]);
    expect(index.search("zyxwvutsrq", 10)).toEqual([]);
  });

  it("matches FTS5 keywords as plain words instead of parsing them", () => {
    expect(index.search("NEAR(", 10)).toEqual([]);
    expect(index.search("NOT OR AND", 10).length).toBeGreaterThan(0);
  });

  it("never throws on arbitrary text, and every snippet stays within 1000 characters", () => {
    const specials = fc.constantFrom(
      ..."\"*^:()-+{}[],.;!?' \\/",
      "AND",
      "OR",
      "NOT",
      "NEAR",
      "title:",
      "refund",
      "risk",
    );
    const text = fc.oneof(fc.string({ unit: "binary", maxLength: 600 }), fc.string({ unit: specials, maxLength: 100 }));
    fc.assert(
      fc.property(text, (query) => {
        for (const hit of index.search(query, 10)) {
          expect(Number.isFinite(hit.score)).toBe(true);
          expect(Array.from(hit.snippet).length).toBeLessThanOrEqual(1000);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe("title weighting", () => {
  it("ranks a document with the word in its title above one with it only in the body", () => {
    const index = SearchIndex.open(":memory:", [
      {
        id: "body-only",
        version: 1,
        title: "Shipping",
        category: "c",
        body: "Our warranty covers shipping damage and other defects.",
      },
      {
        id: "in-title",
        version: 1,
        title: "Warranty",
        category: "c",
        body: "Covers shipping damage and other defects of the item.",
      },
    ]);
    try {
      expect(index.search("warranty", 2).map((h) => h.docId)).toEqual(["in-title", "body-only"]);
    } finally {
      index.close();
    }
  });
});

describe("seeding", () => {
  let dir: string;
  let path: string;
  const doc = (id: string, version: number, body: string): CorpusDocument => ({
    id,
    version,
    title: id,
    category: "c",
    body,
  });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "kb-index-"));
    path = join(dir, "kb-search.db");
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("indexes every document on first open and nothing on a reopen with the same versions", () => {
    const corpus = [doc("a", 1, "apples"), doc("b", 1, "bananas")];
    const first = SearchIndex.open(path, corpus);
    expect(first.seedReport).toEqual({ added: ["a", "b"], updated: [], removed: [], documentCount: 2 });
    first.close();
    const second = SearchIndex.open(path, corpus);
    expect(second.seedReport).toEqual({ added: [], updated: [], removed: [], documentCount: 2 });
    expect(second.search("bananas", 10).map((h) => h.docId)).toEqual(["b"]);
    second.close();
  });

  it("re-indexes a document whose version changed and drops documents no longer shipped", () => {
    SearchIndex.open(path, [doc("a", 1, "apples"), doc("b", 1, "bananas"), doc("c", 1, "cherries")]).close();
    const index = SearchIndex.open(path, [doc("a", 2, "apricots"), doc("b", 1, "bananas")]);
    try {
      expect(index.seedReport).toEqual({ added: [], updated: ["a"], removed: ["c"], documentCount: 2 });
      expect(index.search("apples", 10)).toEqual([]);
      expect(index.search("apricots", 10)).toMatchObject([{ docId: "a", version: 2 }]);
      expect(index.search("cherries", 10)).toEqual([]);
    } finally {
      index.close();
    }
  });

  it("keeps the stored text while the version is unchanged", () => {
    SearchIndex.open(path, [doc("a", 1, "apples")]).close();
    const index = SearchIndex.open(path, [doc("a", 1, "apricots")]);
    try {
      expect(index.search("apples", 10)).toMatchObject([{ docId: "a", version: 1 }]);
    } finally {
      index.close();
    }
  });
});

describe("an index that cannot be read", () => {
  it("reports IndexUnavailableError", () => {
    const index = SearchIndex.open(":memory:", [{ id: "a", version: 1, title: "A", category: "c", body: "apples" }]);
    index.close();
    expect(() => index.search("apples", 1)).toThrow(IndexUnavailableError);
  });
});
