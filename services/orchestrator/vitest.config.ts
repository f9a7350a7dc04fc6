import { configDefaults, defineProject } from "vitest/config";

/**
 * The files that install a process-wide OpenTelemetry tracer provider or context manager to read
 * the spans an in-process orchestrator makes: OpenTelemetry's globals can be set once per process,
 * and test files share their worker process (vitest.config.ts at the root), so these run apart
 * (the root vitest.config.ts runs them apart).
 */
export const GLOBAL_TELEMETRY_FILES = [
  "test/model-bounds.int.test.ts",
  "test/openai-policy.int.test.ts",
  "test/own-numbers-in-traces.int.test.ts",
  "test/trace-sampling.int.test.ts",
];

export default defineProject({
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    exclude: [...configDefaults.exclude, ...GLOBAL_TELEMETRY_FILES],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
