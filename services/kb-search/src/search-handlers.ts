// KbSearchService handlers: validation, auth and deadlines are done by the SDK before a handler
// runs, so the handler only asks the index and translates its failure into the contract's reason.
import type { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { status, ToolError, type ToolHandlers } from "@loopguard/tool-sdk";
import { IndexUnavailableError, type SearchIndex } from "./search-index.js";

/** How long a caller should wait before retrying a search the index could not serve. */
export const INDEX_RETRY_AFTER_MS = 1000;

export interface SearchHandlerDeps {
  readonly index: Pick<SearchIndex, "search">;
}

export function createSearchHandlers({ index }: SearchHandlerDeps): ToolHandlers<typeof KbSearchService> {
  return {
    async search(request) {
      try {
        return { hits: index.search(request.query, request.limit) };
      } catch (error) {
        if (error instanceof IndexUnavailableError) {
          throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", error.message, {
            retryAfterMs: INDEX_RETRY_AFTER_MS,
            cause: error,
          });
        }
        throw error;
      }
    },
  };
}
