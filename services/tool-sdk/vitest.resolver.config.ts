import { defineProject } from "vitest/config";
import { RESOLVER_FILES, sourcesByName } from "./vitest.config.js";

// The files that set grpc-js's resolver before it loads: a worker thread of its own for each (the
// threads pool isolates each file, with a module cache of its own), after the forks pool's files
// are done rather than beside them (groupOrder).
export default defineProject({
  resolve: sourcesByName,
  test: {
    name: "@loopguard/tool-sdk (resolver)",
    include: RESOLVER_FILES,
    pool: "threads",
    sequence: { groupOrder: 1 },
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
