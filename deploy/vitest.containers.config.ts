import { defineProject } from "vitest/config";
import { CONTAINER_FILES } from "./vitest.config.js";

// A forks project with singleFork runs its files in one process, one at a time; groupOrder 2 runs
// it after every other project's files are done: a release or a drill under load shares the
// machine with no other test. Its global setup builds the images meanwhile (test/images-setup.ts).
export default defineProject({
  test: {
    name: "@loopguard/deploy (containers)",
    include: CONTAINER_FILES,
    globalSetup: ["test/images-setup.ts"],
    pool: "forks",
    poolOptions: { forks: { singleFork: true } },
    sequence: { groupOrder: 2 },
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
