import { configDefaults, defineProject } from "vitest/config";

/**
 * The files that run the suite's own pods (fixed loopback addresses: the orchestrator on
 * 127.0.0.1:50051, the cluster DNS on 127.0.0.9) or time the services' starts: one file at a
 * time, after every other test file, with nothing else running (vitest.containers.config.ts).
 */
export const CONTAINER_FILES = [
  "test/containers.int.test.ts",
  "test/drills.int.test.ts",
  "test/release.int.test.ts",
  "test/pod-timings.int.test.ts",
];

export default defineProject({
  test: {
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    exclude: [...configDefaults.exclude, ...CONTAINER_FILES],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
