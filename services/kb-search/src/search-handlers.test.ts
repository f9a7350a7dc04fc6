import { type CallContext, status, ToolError } from "@loopguard/tool-sdk";
import { create } from "@bufbuild/protobuf";
import { SearchRequestSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { describe, expect, it } from "vitest";
import { createSearchHandlers, INDEX_RETRY_AFTER_MS } from "./search-handlers.js";
import { IndexUnavailableError, type SearchHit } from "./search-index.js";

const ctx = {} as CallContext;
const request = create(SearchRequestSchema, { query: "refund", limit: 2 });
const hit: SearchHit = {
  docId: "refund-policy",
  version: 1,
  title: "Refund policy",
  snippet: "[refund]",
  score: 2.5,
  category: "refunds",
};

describe("search handler", () => {
  it("passes the query and limit to the index and returns its hits", async () => {
    const seen: [string, number][] = [];
    const handlers = createSearchHandlers({
      index: {
        search: (q, l) => {
          seen.push([q, l]);
          return [hit];
        },
      },
    });
    expect(await handlers.search(request, ctx)).toEqual({ hits: [hit] });
    expect(seen).toEqual([["refund", 2]]);
  });

  it("turns an unreadable index into UNAVAILABLE INDEX_UNAVAILABLE with a retry delay", async () => {
    const handlers = createSearchHandlers({
      index: {
        search: () => {
          throw new IndexUnavailableError("the knowledge-base index could not be read");
        },
      },
    });
    const error = await handlers.search(request, ctx).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ToolError);
    expect(error).toMatchObject({
      code: status.UNAVAILABLE,
      reason: "INDEX_UNAVAILABLE",
      retryAfterMs: INDEX_RETRY_AFTER_MS,
    });
  });

  it("lets other failures through, so the server reports them as INTERNAL", async () => {
    const bug = new TypeError("bug");
    const handlers = createSearchHandlers({
      index: {
        search: () => {
          throw bug;
        },
      },
    });
    await expect(handlers.search(request, ctx)).rejects.toBe(bug);
  });
});
