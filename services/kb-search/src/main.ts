// kb-search process: read config, open the index seeded from the shipped corpus, serve.
import { join } from "node:path";
import { manifestDefaults, runTool } from "@loopguard/tool-sdk";
import { loadCorpus, SHIPPED_CORPUS_DIR } from "./corpus.js";
import { SearchIndex } from "./search-index.js";
import { build } from "./server.js";

await runTool("kb-search", manifestDefaults(import.meta.url), (config, log) => {
  const index = SearchIndex.open(join(config.dataDir, "kb-search.db"), loadCorpus(SHIPPED_CORPUS_DIR));
  const { added, updated, removed, documentCount } = index.seedReport;
  log.info("index ready", {
    data_dir: config.dataDir,
    doc_count: documentCount,
    added: added.length,
    updated: updated.length,
    removed: removed.length,
  });
  return build({ index });
});
