import { defineProject } from "vitest/config";

export default defineProject({
  test: {
    include: ["e2e/**/*.test.ts", "src/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
