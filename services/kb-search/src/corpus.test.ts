import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CorpusError, loadCorpus, parseDocument, SHIPPED_CORPUS_DIR } from "./corpus.js";

const valid =
  "---\nid: refund-policy\nversion: 2\ntitle: Refund policy\ncategory: refunds\n---\n# Refund policy\n\nText.\n";

describe("shipped corpus", () => {
  const corpus = loadCorpus(SHIPPED_CORPUS_DIR);

  it("has at least 30 documents with unique ids", () => {
    expect(corpus.length).toBeGreaterThanOrEqual(30);
    expect(new Set(corpus.map((d) => d.id)).size).toBe(corpus.length);
  });

  it("covers refunds, risk, payments, shipping, returns, account and product questions", () => {
    const ids = new Set(corpus.map((d) => d.id));
    for (const id of [
      "refund-policy",
      "partial-refunds",
      "refund-timelines",
      "refund-approvals",
      "risk-policy",
      "identity-verification",
      "chargebacks",
      "shipping-policy",
      "returns-policy",
      "account-security",
    ]) {
      expect(ids, id).toContain(id);
    }
    expect(new Set(corpus.map((d) => d.category))).toEqual(
      new Set(["refunds", "risk", "payments", "shipping", "orders", "returns", "account", "products", "support"]),
    );
  });

  it("contains no square brackets, which would be confused with the snippet's match markers", () => {
    for (const doc of corpus) expect(`${doc.title} ${doc.body}`, doc.id).not.toMatch(/[[\]]/);
  });
});

describe("parseDocument", () => {
  it("reads the front matter and the body", () => {
    expect(parseDocument(valid, "x.md")).toEqual({
      id: "refund-policy",
      version: 2,
      title: "Refund policy",
      category: "refunds",
      body: "# Refund policy\n\nText.",
    });
  });

  it.each([
    ["no front matter", "# Refund policy\n"],
    ["an id with upper case", valid.replace("id: refund-policy", "id: Refund")],
    ["version 0", valid.replace("version: 2", "version: 0")],
    ["a fractional version", valid.replace("version: 2", "version: 1.5")],
    ["no title", valid.replace("title: Refund policy\n", "")],
    ["a title over 200 characters", valid.replace("title: Refund policy", `title: ${"t".repeat(201)}`)],
    ["an empty body", valid.replace(/---\n# Refund[\s\S]*$/, "---\n\n")],
  ])("rejects a document with %s", (_, text) => {
    expect(() => parseDocument(text, "x.md")).toThrow(CorpusError);
  });
});

describe("loadCorpus", () => {
  it("rejects a file whose name differs from its id", () => {
    const dir = mkdtempSync(join(tmpdir(), "kb-corpus-"));
    try {
      writeFileSync(join(dir, "other.md"), valid);
      expect(() => loadCorpus(dir)).toThrow(/file name must be "refund-policy.md"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
