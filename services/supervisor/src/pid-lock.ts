// A lock file naming the supervisor that holds it (a data folder's, a port's), taken atomically:
// the pid is written to a file of this process's own, then hard-linked to the lock's name, which
// fails when the name exists, so the lock is never seen half-written. A holder that is gone is
// taken over under a second such lock, `<lock>.takeover`, and only if the lock is still the very
// file judged stale: a read, a judgement and a removal by two starts at once let both take it.
// By hand: a lock library (proper-lockfile) judges a lock stale by an mtime it keeps refreshing on a
// timer; on one machine the holder's pid says it directly.
import { closeSync, fstatSync, linkSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";

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

/** A lock not naming a pid this young is one being written by another start (one without the link): held. */
const BEING_WRITTEN_MS = 5_000;

interface Seen {
  readonly ino: number;
  readonly text: string;
  readonly mtimeMs: number;
}

function read(file: string): Seen | undefined {
  let fd: number;
  try {
    fd = openSync(file, "r");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  try {
    const { ino, mtimeMs } = fstatSync(fd);
    return { ino, mtimeMs, text: readFileSync(fd, "utf8") };
  } catch (error) {
    // A read by descriptor names no file (a folder where the lock should be: EISDIR).
    throw Object.assign(error as Error, { path: file });
  } finally {
    closeSync(fd);
  }
}

/** The live supervisor holding a lock seen, "starting" while one is being written, "gone" when it may be taken over. */
function holderOf(seen: Seen): number | "starting" | "gone" {
  const pid = Number(/^\s*(\d+)\s*$/.exec(seen.text)?.[1] ?? Number.NaN);
  if (Number.isNaN(pid)) return Date.now() - seen.mtimeMs < BEING_WRITTEN_MS ? "starting" : "gone";
  return pid > 0 && supervisorAlive(pid) ? pid : "gone";
}

/** Creates `file` naming this process, whole; false when it exists. */
function create(file: string): boolean {
  const own = `${file}.${process.pid}`;
  // A pid is no secret: another user's start may read whose a port's lock is.
  try {
    writeFileSync(own, `${process.pid}\n`, { mode: 0o644 });
  } catch (error) {
    // The folder refuses the lock (EACCES): said of the lock, not of this process's own file.
    throw Object.assign(error as Error, { path: file });
  }
  try {
    linkSync(own, file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    return false;
  } finally {
    rmSync(own, { force: true });
  }
}

/** Removes the lock `seen` if it is still that file, under the takeover lock; another start taking it over meanwhile wins. */
function removeStale(file: string, seen: Seen): void {
  const takeover = `${file}.takeover`;
  if (!create(takeover)) {
    const other = read(takeover);
    // A start that died within its takeover (a moment long) left it behind.
    if (other && holderOf(other) === "gone") rmSync(takeover, { force: true });
    return;
  }
  try {
    const now = read(file);
    if (now && now.ino === seen.ino && now.text === seen.text) rmSync(file);
  } finally {
    rmSync(takeover, { force: true });
  }
}

/** This process holds the lock (and `release` lets it go), or `holder` does (undefined: a start at this moment). */
export type PidLock = { readonly release: () => void } | { readonly holder: number | undefined };

export function takePidLock(file: string): PidLock {
  for (let attempt = 0; attempt < 4; attempt += 1) {
    if (create(file))
      return {
        // Only its own: a later suite's lock is not this process's to remove (nor is one already gone).
        release: () => {
          if (read(file)?.text === `${process.pid}\n`) rmSync(file, { force: true });
        },
      };
    const seen = read(file);
    if (!seen) continue;
    const holder = holderOf(seen);
    if (holder === "starting") return { holder: undefined };
    if (holder !== "gone") return { holder };
    removeStale(file, seen);
  }
  return { holder: undefined };
}
