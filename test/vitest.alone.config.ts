import { defineProject } from "vitest/config";
import { TIMED_FILES } from "./vitest.config.js";

// The timed files: after the forks pool's files are done (groupOrder), one at a time in a thread
// of their own (the threads pool's settings in the root vitest.config.ts).
export default defineProject({
  test: {
    name: "@loopguard/test (alone)",
    include: TIMED_FILES,
    pool: "threads",
    sequence: { groupOrder: 1 },
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
