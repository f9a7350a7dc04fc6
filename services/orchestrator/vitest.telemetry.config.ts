import { defineProject } from "vitest/config";
import { GLOBAL_TELEMETRY_FILES } from "./vitest.config.js";

// The files that set OpenTelemetry's process-wide globals: a worker thread of its own for each
// (the threads pool isolates each file; OpenTelemetry's globals live on the thread's globalThis),
// after the forks pool's files are done rather than beside them (groupOrder).
export default defineProject({
  test: {
    name: "@loopguard/orchestrator (telemetry)",
    include: GLOBAL_TELEMETRY_FILES,
    pool: "threads",
    sequence: { groupOrder: 1 },
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
