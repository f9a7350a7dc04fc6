import { availableParallelism } from "node:os";
import { defineConfig, type TestProjectInlineConfiguration } from "vitest/config";
import { GLOBAL_TELEMETRY_FILES } from "./services/orchestrator/vitest.config.js";
import { RESOLVER_FILES, sourcesByName } from "./services/tool-sdk/vitest.config.js";
import { CHECK_FILES, TIMED_FILES } from "./test/vitest.config.js";

/**
 * A package's files that must not share a worker process: they set process-wide state before a
 * library loads, or time a service against its contract's targets. They run after the forks pool's
 * files are done rather than beside them (groupOrder), in the threads pool, one file at a time, each
 * in a thread of its own (poolOptions.threads below).
 */
function apart(
  root: string,
  name: string,
  include: string[],
  resolve?: TestProjectInlineConfiguration["resolve"],
): TestProjectInlineConfiguration {
  return {
    ...(resolve ? { resolve } : {}),
    test: {
      name: `@loopguard/${name}`,
      root,
      include,
      pool: "threads",
      sequence: { groupOrder: 1 },
      testTimeout: 60_000,
      hookTimeout: 60_000,
    },
  };
}

// Every workspace package is a vitest project, so a new service's tests run without editing a list.
// A few files are projects of their own: deploy's container tests run last and alone (see its
// config); the files each package's config lists to run apart run in threads of their own (above);
// the workspace's checks are judged at the very end.
export default defineConfig({
  test: {
    projects: [
      "services/*",
      "deploy",
      "deploy/vitest.containers.config.ts",
      "test",
      apart("services/orchestrator", "orchestrator (telemetry)", GLOBAL_TELEMETRY_FILES),
      apart("services/tool-sdk", "tool-sdk (resolver)", RESOLVER_FILES, sourcesByName),
      apart("test", "test (alone)", TIMED_FILES),
      // The workspace's checks run beside the tests from the start, at the lowest CPU priority (its
      // global setup); its file judges them after every other file, the containers' too.
      {
        test: {
          name: "@loopguard/test (checks)",
          root: "test",
          include: CHECK_FILES,
          globalSetup: ["src/checks/background.ts"],
          pool: "forks",
          sequence: { groupOrder: 3 },
        },
      },
    ],
    // Two test files at once even on two cores (vitest's default there is one): 5-12 % less wall
    // time there, measured in docs/performance.md ("The test suite's wall time on 2 cores").
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // A forks worker runs one project's files one after another in the same process: each package's
    // imports (grpc-js, protobuf-es, OpenTelemetry, SQLite) load once per worker, not once per file.
    // Each file starts its own servers on their own ports, data folders and key files.
    // The threads pool (the files run apart) runs one file at a time, each in a thread of its own:
    // a thread's process.cpuUsage() counts every thread of the process, and
    // model-bounds.int.test.ts bounds a session's CPU.
    poolOptions: { forks: { isolate: false }, threads: { maxThreads: 1 } },
  },
});
