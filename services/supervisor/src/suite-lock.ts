// One suite per data folder: `pnpm start` takes <data>/supervisor.pid (created exclusively) before
// it makes keys or starts anything (its ports: ports.ts). Without it, a second start in the same
// folder raced the first for its key files and then reported "up" on the first suite's health
// answers while its own services crash-looped on EADDRINUSE.
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { supervisorAlive } from "./pid-lock.js";

/** Why the suite cannot start here; the message is the one line the user sees. */
export class SuiteLockError extends Error {
  override readonly name = "SuiteLockError";
}

/**
 * Takes the data folder for this process; returns what lets it go. A lock left by a supervisor that
 * is gone (killed, crashed) is taken over.
 */
export function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, "supervisor.pid");
  for (let attempt = 0; attempt < 2; attempt += 1) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: "wx", mode: 0o600 });
      return () => {
        // Only its own: a later suite's lock is not this process's to remove (nor is one already gone).
        if (existsSync(file) && readFileSync(file, "utf8").trim() === String(process.pid))
          rmSync(file, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const holder = Number.parseInt(readFileSync(file, "utf8"), 10);
    if (Number.isSafeInteger(holder) && holder > 0 && supervisorAlive(holder))
      throw new SuiteLockError(
        `a suite is already running on ${dataDir} (supervisor pid ${holder}): stop it (Ctrl-C where it runs, or kill ${holder}) or give this one another LOOPGUARD_DATA_DIR`,
      );
    rmSync(file, { force: true });
  }
  throw new SuiteLockError(`${file}: another start took the data folder at the same moment; try again`);
}
