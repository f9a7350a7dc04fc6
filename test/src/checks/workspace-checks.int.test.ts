// The workspace's own checks as tests: started beside the other files at the lowest CPU priority
// (background.ts), judged here after every other file. A failed check fails its test with the end
// of its output. And the run leaves nothing of its own in the temp folder.
import { existsSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { repoRoot } from "@loopguard/test-kit";
import { describe, expect, it } from "vitest";
import { CHECKS, checksDir, TEMP_BEFORE } from "./checks.js";
import { describeLeftovers, newEntries } from "./temp-entries.js";

/** How long a check may still take once the tests are done: the typecheck alone takes ~1–2 min of a core. */
const WAIT_MS = 15 * 60_000;

async function exitCodeOf(name: string): Promise<number | string> {
  const status = join(checksDir(repoRoot), `${name}.json`);
  const until = Date.now() + WAIT_MS;
  while (!existsSync(status)) {
    if (Date.now() > until) throw new Error(`the ${name} check did not end within ${WAIT_MS / 60_000} minutes`);
    await sleep(1_000);
  }
  return (JSON.parse(readFileSync(status, "utf8")) as { code: number | string }).code;
}

describe("the workspace's checks", () => {
  for (const check of CHECKS) {
    it(
      check.proves,
      async () => {
        const code = await exitCodeOf(check.name);
        const output = readFileSync(join(checksDir(repoRoot), `${check.name}.log`), "utf8");
        expect(code, `${check.command.join(" ")} failed:\n${output.slice(-4000)}`).toBe(0);
      },
      WAIT_MS + 60_000,
    );
  }
});

describe("the test run's temp folders", () => {
  // Last in the last file: every other file has ended, and so should every process they started.
  it("are all removed: no loopguard-* entry in the OS temp folder that was not there as the run started", () => {
    const left = newEntries(tmpdir(), join(checksDir(repoRoot), TEMP_BEFORE));
    expect(left, describeLeftovers(left)).toEqual([]);
  });
});
