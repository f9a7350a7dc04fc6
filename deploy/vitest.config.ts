import { defineProject } from "vitest/config";

export default defineProject({
  test: {
    // The containers, release and drills tests run pods on fixed loopback addresses: one file at a
    // time, in one process.
    pool: "forks",
    poolOptions: { forks: { singleFork: true } },
    include: ["src/**/*.test.ts", "test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
