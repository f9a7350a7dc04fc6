// build(deps): the kb-search ToolDefinition, imported by main.ts and by the tests.
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import type { ToolDefinition } from "@loopguard/tool-sdk";
import { createSearchHandlers } from "./search-handlers.js";
import type { SearchIndex } from "./search-index.js";

export interface KbSearchDeps {
  readonly index: SearchIndex;
}

export function build({ index }: KbSearchDeps): ToolDefinition<typeof KbSearchService> {
  return {
    service: KbSearchService,
    handlers: createSearchHandlers({ index }),
    close: () => index.close(),
  };
}

export { type CorpusDocument, loadCorpus, SHIPPED_CORPUS_DIR } from "./corpus.js";
export { type SearchHit, SearchIndex, type SeedReport } from "./search-index.js";
