import { fileURLToPath } from "node:url";
import { configDefaults, defineProject } from "vitest/config";

/**
 * The files that choose how grpc-js resolves names before it loads (an environment variable read
 * once per process), while test files share their worker process (vitest.config.ts at the root):
 * these run apart, each in a worker thread of its own (the root vitest.config.ts).
 */
export const RESOLVER_FILES = ["test/discovery.int.test.ts"];

/** What both of the package's projects resolve: testing/ imports the SDK by its name; here that must be the same sources the tests import (one CallError class for `instanceof`), not the built dist/. */
export const sourcesByName = {
  alias: [{ find: /^@loopguard\/tool-sdk$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) }],
};

export default defineProject({
  resolve: sourcesByName,
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    exclude: [...configDefaults.exclude, ...RESOLVER_FILES],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
