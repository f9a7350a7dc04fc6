import { fileURLToPath } from "node:url";
import { defineProject } from "vitest/config";

export default defineProject({
  // testing/ imports the SDK by its name; here that must be the same sources the tests import
  // (one CallError class for `instanceof`), not the built dist/.
  resolve: {
    alias: [{ find: /^@loopguard\/tool-sdk$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) }],
  },
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
