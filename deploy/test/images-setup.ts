// The containers project's global setup: `pnpm images` starts as the test run begins, in the
// background, at a lower CPU priority and with half a core for its steps. The files that need the
// images run after every other file, so the build (minutes from nothing) overlaps those instead of
// coming before them; each such file still runs `pnpm images` itself, which waits for this build's
// turn (build-turn.ts) and then finds every layer built. A failed build shows there, with its log.
// Output: .data/images/background.log.
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync } from "node:fs";
import { setPriority } from "node:os";
import { join } from "node:path";
import { repoRoot, shellEnv, unlessEnded } from "@loopguard/test-kit";

/** The build's own process (and the base image's debootstrap) yields to the tests' processes. */
const LOWER_PRIORITY = 10;
/** The build's steps run in Docker's containers, which no niceness reaches: they get half a core. */
const BUILD_CPUS = "0.5";

export default function setup(): () => Promise<void> {
  const root = repoRoot;
  const logDir = join(root, ".data", "images");
  mkdirSync(logDir, { recursive: true });
  const out = openSync(join(logDir, "background.log"), "w");
  const build = spawn(process.execPath, [join(root, "deploy", "dist", "local", "images-main.js")], {
    cwd: root,
    env: { ...shellEnv(), LOOPGUARD_IMAGE_BUILD_CPUS: BUILD_CPUS },
    stdio: ["ignore", out, out],
    // Its own process group, so that a run cut short stops the docker client it started too.
    detached: true,
  });
  closeSync(out);
  const { pid } = build;
  const ended = new Promise<void>((resolve) => {
    build.once("close", () => resolve());
    build.once("error", () => resolve());
  });
  // A build with nothing to do may have ended already: nothing to lower then.
  if (pid !== undefined) unlessEnded(() => setPriority(pid, LOWER_PRIORITY));
  // A run that ends before the build (cut short) stops it; its lock goes with it.
  return async () => {
    if (pid !== undefined && build.exitCode === null && build.signalCode === null)
      unlessEnded(() => process.kill(-pid, "SIGTERM"));
    await ended;
  };
}
