// KbSearchService over a real grpc-js server and client, with the shipped corpus.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { refusal } from "@loopguard/test-kit";
import type { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { CallError, type RawClient, status } from "@loopguard/tool-sdk";
import { startTestTool, type TestTool } from "@loopguard/tool-sdk/testing";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadCorpus, SHIPPED_CORPUS_DIR } from "../src/corpus.js";
import { SearchIndex } from "../src/search-index.js";
import { build } from "../src/server.js";

type KbClient = RawClient<typeof KbSearchService>;

const codePoints = (text: string) => Array.from(text).length;

describe("KbSearchService.Search", () => {
  let dataDir: string;
  let tool: TestTool<typeof KbSearchService>;
  let client: KbClient;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "kb-search-int-"));
    const index = SearchIndex.open(join(dataDir, "kb-search.db"), loadCorpus(SHIPPED_CORPUS_DIR));
    tool = await startTestTool(build({ index }));
    client = await tool.client(["kb:read"]);
  });

  afterAll(async () => {
    await tool.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("answers a valid request with hits that carry id, version, title, snippet, score and category", async () => {
    const { hits } = await client.search({ query: "chargeback", limit: 3 });
    expect(hits.length).toBeGreaterThan(0);
    expect(hits[0]).toMatchObject({
      docId: "chargebacks",
      version: 1,
      title: "Chargebacks and payment disputes",
      category: "payments",
    });
    expect(hits[0]?.snippet).toContain("[");
    for (const hit of hits) expect(Number.isFinite(hit.score)).toBe(true);
  });

  it('ranks the refund policy first for "refund"', async () => {
    const { hits } = await client.search({ query: "refund", limit: 5 });
    expect(hits[0]?.docId).toBe("refund-policy");
  });

  it.each([1, 3, 10])("returns at most %i hits for limit %i", async (limit) => {
    const { hits } = await client.search({ query: "refund order risk account shipping payment", limit });
    expect(hits).toHaveLength(limit);
  });

  it("returns no hits, not an error, for a query of punctuation only", async () => {
    const { hits } = await client.search({ query: '"*^:()-+?!', limit: 10 });
    expect(hits).toEqual([]);
  });

  it.each([
    ["an empty query", { query: "", limit: 5 }, "query"],
    ["a 513-character query", { query: "r".repeat(513), limit: 5 }, "query"],
    ["limit 0", { query: "refund", limit: 0 }, "limit"],
    ["limit 11", { query: "refund", limit: 11 }, "limit"],
  ])("refuses %s with INVALID_ARGUMENT naming the field", async (_, request, field) => {
    const error = await refusal(client.search(request), CallError);
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.reason).toBe("REQUEST_INVALID");
    expect(error.fieldViolations.map((v) => v.field)).toEqual([field]);
  });

  it("accepts a query of exactly 512 characters", async () => {
    const { hits } = await client.search({ query: "refund ".repeat(74).slice(0, 512), limit: 1 });
    expect(hits[0]?.docId).toBe("refund-policy");
  });

  it("refuses a caller without scope kb:read with PERMISSION_DENIED", async () => {
    const other = await tool.client(["billing:read"]);
    const error = await refusal(other.search({ query: "refund", limit: 1 }), CallError);
    expect(error.code).toBe(status.PERMISSION_DENIED);
    expect(error.reason).toBe("SCOPE_MISSING");
  });

  it("answers 1,000 random requests with OK or INVALID_ARGUMENT only, as the contract's rules say", async () => {
    const punctuation = fc.constantFrom(
      ..."\"*^:()-+{}[],.;!?'`~\\/|&<>=_#@$% \t\n",
      "AND",
      "OR",
      "NOT",
      "NEAR",
      "title:",
      "body:",
      "refund",
    );
    const query = fc.oneof(
      fc.string({ unit: "binary", maxLength: 600 }),
      fc.string({ unit: punctuation, maxLength: 300 }),
      fc.string({ unit: "grapheme", maxLength: 600 }),
    );
    await fc.assert(
      fc.asyncProperty(query, fc.integer({ min: 0, max: 12 }), async (text, limit) => {
        const valid = codePoints(text) >= 1 && codePoints(text) <= 512 && limit >= 1 && limit <= 10;
        try {
          const { hits } = await client.search({ query: text, limit });
          expect(valid).toBe(true);
          expect(hits.length).toBeLessThanOrEqual(limit);
        } catch (error) {
          if (!(error instanceof CallError)) throw error;
          expect(status[error.code]).toBe("INVALID_ARGUMENT");
          expect(valid).toBe(false);
        }
      }),
      { numRuns: 1000 },
    );
  });
});

describe("KbSearchService.Search with an index that cannot be read", () => {
  it("fails with UNAVAILABLE, reason INDEX_UNAVAILABLE and a retry delay", async () => {
    const index = SearchIndex.open(":memory:", loadCorpus(SHIPPED_CORPUS_DIR));
    const tool = await startTestTool({ ...build({ index }), close: undefined });
    try {
      const client = await tool.client(["kb:read"]);
      index.close();
      const error = await refusal(client.search({ query: "refund", limit: 1 }), CallError);
      expect(error.code).toBe(status.UNAVAILABLE);
      expect(error.reason).toBe("INDEX_UNAVAILABLE");
      expect(error.retryAfterMs).toBe(1000);
    } finally {
      await tool.close();
    }
  });
});
