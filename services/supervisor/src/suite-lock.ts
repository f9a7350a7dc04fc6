// One suite per data folder: `pnpm start` takes <data>/supervisor.pid (pid-lock.ts) before
// it makes keys or starts anything (its ports: ports.ts). Without it, a second start in the same
// folder raced the first for its key files and then reported "up" on the first suite's health
// answers while its own services crash-looped on EADDRINUSE.
import { join } from "node:path";
import { takePidLock } from "./pid-lock.js";

/** Why the suite cannot start here; the message is the one line the user sees. */
export class SuiteLockError extends Error {
  override readonly name = "SuiteLockError";
}

/**
 * Takes the data folder for this process; returns what lets it go. A lock left by a supervisor that
 * is gone (killed, crashed) is taken over.
 */
export function lockDataDir(dataDir: string): () => void {
  const lock = takePidLock(join(dataDir, "supervisor.pid"));
  if ("release" in lock) return lock.release;
  const { holder } = lock;
  throw new SuiteLockError(
    holder === undefined
      ? `another start is taking ${dataDir} at this moment: try again, or give this one another LOOPGUARD_DATA_DIR`
      : `a suite is already running on ${dataDir} (supervisor pid ${holder}): stop it (Ctrl-C where it runs, or kill ${holder}) or give this one another LOOPGUARD_DATA_DIR`,
  );
}
