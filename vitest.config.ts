import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

// Every workspace package is a vitest project, so a new service's tests run without editing a list.
// A few files are projects of their own (see each config): deploy's container tests run last and
// alone; the files that set process-wide state before a library loads, and those that time a
// service against its contract's targets, run after the others in threads of their own.
export default defineConfig({
  test: {
    projects: [
      "services/*",
      "services/orchestrator/vitest.telemetry.config.ts",
      "services/tool-sdk/vitest.resolver.config.ts",
      "deploy",
      "deploy/vitest.containers.config.ts",
      "test",
      "test/vitest.alone.config.ts",
    ],
    // Two test files at once even on two cores (vitest's default there is one): 5-12 % less wall
    // time there, measured in docs/performance.md ("The test suite's wall time on 2 cores").
    maxWorkers: Math.max(2, availableParallelism() - 1),
    // A forks worker runs one project's files one after another in the same process: each package's
    // imports (grpc-js, protobuf-es, OpenTelemetry, SQLite) load once per worker, not once per file.
    // Each file starts its own servers on their own ports, data folders and key files.
    // The threads pool (the few files that set process-wide state or time a service) runs one file
    // at a time, each in a thread of its own: a thread's process.cpuUsage() counts every thread of
    // the process, and model-bounds.int.test.ts bounds a session's CPU.
    poolOptions: { forks: { isolate: false }, threads: { maxThreads: 1 } },
  },
});
