// The checks project's global setup: the workspace's own checks start as the test run begins, one
// after another, in the background at the lowest CPU priority. They take what the tests leave idle
// (the files run one at a time near the end, the containers' waits), not the tests' own cores.
// workspace-checks.int.test.ts, run after every other file, waits for each and reads its result.
// Output: .data/checks/<check>.log, and <check>.json with its exit code once it has ended; and
// tmp-before.json, the temp folder's loopguard-* entries as the run starts.
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot, shellEnv, unlessEnded } from "@loopguard/test-kit";
import { CHECKS, checksDir, TEMP_BEFORE } from "./checks.js";
import { recordEntries } from "./temp-entries.js";

export default function setup(): () => Promise<void> {
  const dir = checksDir(repoRoot);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  recordEntries(tmpdir(), join(dir, TEMP_BEFORE));
  let current: ChildProcess | undefined;
  let stopped = false;
  const all = (async () => {
    for (const check of CHECKS) {
      if (stopped) return;
      const out = openSync(join(dir, `${check.name}.log`), "w");
      // `nice` before the command, so every process it starts (pnpm's tsc runs) yields as well.
      current = spawn("nice", ["-n", "19", ...check.command], {
        cwd: repoRoot,
        env: shellEnv(),
        stdio: ["ignore", out, out],
        // Its own process group, so that a run cut short stops what it started too.
        detached: true,
      });
      closeSync(out);
      const code = await new Promise<number | string>((resolve) => {
        current!.once("close", (exit, signal) => resolve(exit ?? signal ?? -1));
        current!.once("error", (error) => resolve(error.message));
      });
      writeFileSync(join(dir, `${check.name}.json`), JSON.stringify({ code }));
    }
  })();
  // A run that ends before the checks (cut short) stops the one running.
  return async () => {
    stopped = true;
    const pid = current?.pid;
    if (pid !== undefined && current!.exitCode === null && current!.signalCode === null)
      unlessEnded(() => process.kill(-pid, "SIGTERM"));
    await all;
  };
}
