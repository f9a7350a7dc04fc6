import { configDefaults, defineProject } from "vitest/config";

/**
 * The files that hold a service to its contract's latency targets from the test's own process:
 * they run after every other project's files, alone (the root vitest.config.ts), so what they time is
 * the service, not a neighbour's load or a shared worker's heap.
 */
export const TIMED_FILES = ["e2e/watch-load.int.test.ts"];

/** The workspace's checks (typecheck, generated files, manifests), judged after every other file (the root vitest.config.ts). */
export const CHECK_FILES = ["src/checks/workspace-checks.int.test.ts"];

export default defineProject({
  test: {
    include: ["e2e/**/*.test.ts", "src/**/*.test.ts"],
    exclude: [...configDefaults.exclude, ...TIMED_FILES, ...CHECK_FILES],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
