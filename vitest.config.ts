import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

// Every workspace package is a vitest project, so a new service's tests run without editing a list.
// deploy's container tests are a project of their own that runs last, alone (see its config).
export default defineConfig({
  test: {
    projects: ["services/*", "deploy", "deploy/vitest.containers.config.ts", "test"],
    // Two test files at once even on two cores (vitest's default there is one): 5-12 % less wall
    // time there, measured in docs/performance.md ("The test suite's wall time on 2 cores").
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
