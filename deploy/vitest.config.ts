import { defineProject } from "vitest/config";

export default defineProject({
  test: {
    // The containers and drills tests run pods on fixed loopback addresses: one file at a time.
    fileParallelism: false,
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
