// One image build at a time per machine: builds share one Docker engine, and two building the same
// layers at once each do all the work. `pnpm test` starts a build in the background while the other
// tests run (test/images-setup.ts); a containers test that asks for the images meanwhile waits for
// that build, then finds every layer built. The lock is proper-lockfile's (a directory made
// atomically, its mtime kept fresh while held; one left by a killed build goes stale in 30 s).
import { tmpdir } from "node:os";
import { join } from "node:path";
import { lock } from "proper-lockfile";

const LOCK = join(tmpdir(), "loopguard-images");
const STALE_MS = 30_000;
/** Longest a build waits for another's: about as long as a build from nothing takes on a slow machine. */
const WAIT_S = 30 * 60;

/** Waits for any other image build on this machine to end; returns the release of this build's turn. */
export async function takeBuildTurn(
  log: (line: string) => void,
  { path = LOCK, waitS = WAIT_S }: { path?: string; waitS?: number } = {},
): Promise<() => Promise<void>> {
  const options = { realpath: false, stale: STALE_MS };
  try {
    return await lock(path, { ...options, retries: 0 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ELOCKED") throw error;
  }
  log("another image build is running on this machine: waiting for it to end");
  return lock(path, { ...options, retries: { retries: waitS, factor: 1, minTimeout: 1000, maxTimeout: 1000 } });
}
