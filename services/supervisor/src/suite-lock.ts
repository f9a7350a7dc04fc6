// One suite per data folder, and none on ports another program holds: `pnpm start` takes
// <data>/supervisor.pid (created exclusively) before it makes keys or starts anything, and checks
// that each service's ports are free. Without these, a second start in the same folder raced the
// first for its key files and then reported "up" on the first suite's health answers while its own
// services crash-looped on EADDRINUSE. By hand: a lock library (proper-lockfile) judges a lock stale
// by an mtime it keeps refreshing on a timer; on one machine the holder's pid says it directly.
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";

/** Why the suite cannot start here; the message is the one line the user sees. */
export class SuiteLockError extends Error {
  override readonly name = "SuiteLockError";
}

/** Whether `pid` is a live supervisor (not some process that reused a dead one's pid). */
function supervisorAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("supervisor");
  } catch {
    // No /proc (not Linux): the pid is alive, so it is taken to be the suite's.
    return true;
  }
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

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** Refuses to start while another program (a suite of another data folder, say) holds a service's port. */
export async function requireFreePorts(specs: readonly ServiceSpec[]): Promise<void> {
  for (const spec of specs) {
    for (const [what, port] of [
      ["gRPC", spec.port],
      ["HTTP", spec.metricsPort],
    ] as const) {
      if (!(await portFree(port)))
        throw new SuiteLockError(
          `port ${port} (${spec.name} ${what}) is in use on 127.0.0.1: another suite (another data folder?) or program holds it; stop it first`,
        );
    }
  }
}
