// Where the step-trace JSONL files live and how long they stay. rotating-file-stream starts a new
// file at each UTC midnight and after the write that takes one past its size, never renaming one
// (its `immutable` mode, what log shippers tail best): `steps.<UTC day>.<n>.jsonl`, the highest
// <n> of the newest day being the one written (a restart appends to it, after ending a line that
// a crash cut short). (pino-roll was tried
// first: it rolls by size only once sonic-boom's buffer drains, which under steady load is late.)
// Its own limits count the rotated files only and need a history file beside them, so the
// total-size cap and the age limit are the small sweep below, run whenever a file is opened: files
// older than the age limit go, then the oldest until those left fit the cap with room for the open
// file to grow to its full size. Defaults fit the orchestrator's 1 GiB emptyDir
// (docs/kubernetes.md) with half of it to spare.
import { appendFileSync, closeSync, existsSync, fstatSync, openSync, readdirSync, readSync } from "node:fs";
import { readdir, stat, unlink } from "node:fs/promises";
import { basename, join, normalize } from "node:path";
import { PRIVATE_FILE_MODE } from "@loopguard/sql-store";
import { createStream, type RotatingFileStream } from "rotating-file-stream";

export interface TraceRetention {
  /** A file is rolled once it reaches this size (it may pass it by the last write). */
  readonly fileBytes: number;
  /** Every trace file together, the open one included, stays at or under this. */
  readonly totalBytes: number;
  /** A file whose last line is older than this is deleted. */
  readonly maxAgeMs: number;
}

const MIB = 1024 * 1024;

export const DEFAULT_TRACE_RETENTION: TraceRetention = Object.freeze({
  fileBytes: 64 * MIB,
  totalBytes: 512 * MIB,
  maxAgeMs: 7 * 24 * 3600_000,
});

/** Rolled files, and the one-file-per-day `steps-<day>.jsonl` of earlier releases (swept too). */
const TRACE_FILE = /^steps[.-][\w.-]*\.jsonl$/;

export interface TraceFile {
  readonly path: string;
  readonly bytes: number;
  readonly mtimeMs: number;
}

const byName = new Intl.Collator("en", { numeric: true });

/** The step-trace files in `dir`, oldest first: by last write, then by name (day, then number). */
export async function listTraceFiles(dir: string): Promise<TraceFile[]> {
  const names = (await readdir(dir).catch(() => [] as string[])).filter((name) => TRACE_FILE.test(name));
  const files = await Promise.all(
    names.map(async (name) => {
      const path = join(dir, name);
      const info = await stat(path).catch(() => undefined);
      return info?.isFile() ? { path, bytes: info.size, mtimeMs: info.mtimeMs } : undefined;
    }),
  );
  return files.filter((f) => f !== undefined).sort((a, b) => a.mtimeMs - b.mtimeMs || byName.compare(a.path, b.path));
}

/**
 * Deletes what the retention no longer keeps, never the open file: the files past the age limit,
 * then the oldest until the rest fit the cap beside the open file at its full size (or its actual
 * size, once a write took it past that). Returns the deleted paths.
 */
export async function sweepTraceFiles(
  dir: string,
  retention: TraceRetention,
  open: string | undefined,
  now = Date.now(),
): Promise<string[]> {
  const files = await listTraceFiles(dir);
  const openPath = open === undefined ? undefined : normalize(open);
  const reserve = Math.max(retention.fileBytes, files.find((f) => f.path === openPath)?.bytes ?? 0);
  const closed = files.filter((f) => f.path !== openPath);
  const doomed = closed.filter((f) => now - f.mtimeMs > retention.maxAgeMs);
  const kept = closed.filter((f) => !doomed.includes(f));
  let bytes = kept.reduce((sum, f) => sum + f.bytes, 0);
  for (const file of kept) {
    if (bytes + reserve <= retention.totalBytes) break;
    doomed.push(file);
    bytes -= file.bytes;
  }
  // A file another sweep deleted first is gone all the same.
  await Promise.all(doomed.map((f) => unlink(f.path).catch(() => undefined)));
  return doomed.map((f) => f.path);
}

export interface TraceFileWriter {
  readonly destination: RotatingFileStream;
  /** Settles once the sweeps started so far are done. */
  swept(): Promise<void>;
}

const DAY_FILE = /^steps\.(\d{4}-\d{2}-\d{2})\.(\d+)\.jsonl$/;

/** The highest <n> of `day`'s files in `dir`, 1 when it has none (or `dir` is gone: the stream makes it again). */
function highestNumber(dir: string, day: string): number {
  let highest = 1;
  for (const name of existsSync(dir) ? readdirSync(dir) : []) {
    const match = DAY_FILE.exec(name);
    if (match?.[1] === day) highest = Math.max(highest, Number(match[2]));
  }
  return highest;
}

/**
 * `steps.<UTC day>.<n>.jsonl`, for rotating-file-stream, which asks for names by index from 1 up
 * and takes the first whose file is missing or not yet full. Index 1 is named after the file opened
 * last that day (on disk at the start), so the numbers only rise: once the sweep deleted a day's
 * first files, a new file would otherwise take one of their numbers and sort before older ones.
 * `fresh` names index 1 after the next number instead.
 */
function traceFileNames(
  dir: string,
  fresh: boolean,
): {
  name: (time: Date | number | null, index?: number) => string;
  opened(path: string): void;
} {
  let last: { day: string; n: number } | undefined;
  return {
    name(time, index = 1) {
      const day = new Date(time ?? Date.now()).toISOString().slice(0, 10);
      const base = last?.day === day ? last.n : highestNumber(dir, day) + (fresh ? 1 : 0);
      return `steps.${day}.${base + index - 1}.jsonl`;
    },
    opened(path) {
      const match = DAY_FILE.exec(basename(path));
      if (match) last = { day: match[1]!, n: Number(match[2]) };
    },
  };
}

/**
 * Opens the rolling file in `dir` (which must exist) and sweeps whenever a file is opened. `fresh`
 * starts a new file rather than appending to the day's last (after a failure: its last line may be cut short).
 */
export function openTraceFile(dir: string, retention: TraceRetention, { fresh = false } = {}): TraceFileWriter {
  const names = traceFileNames(dir, fresh);
  if (!fresh) endTornLine(join(dir, names.name(Date.now())));
  const destination = createStream(names.name, {
    path: dir,
    size: `${retention.fileBytes}B`,
    interval: "1d",
    intervalBoundary: true,
    intervalUTC: true,
    immutable: true,
    mode: PRIVATE_FILE_MODE,
  });
  let sweeping = Promise.resolve();
  // A write may take the open file past its size, and the directory past the cap by less than
  // that write, until the new file it makes rotating-file-stream open, and this sweep, a moment later.
  destination.on("open", (path: string) => {
    names.opened(path);
    sweeping = sweeping
      .then(() => sweepTraceFiles(dir, retention, path))
      .then(
        () => undefined,
        () => undefined,
      );
  });
  return { destination, swept: () => sweeping };
}

/**
 * Ends the last line of the file a restart appends to when a crash cut it short, so the first
 * record written after it is a line of its own (the cut one stays what it is: one bad line).
 */
function endTornLine(path: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const { size } = fstatSync(fd);
    const last = Buffer.alloc(1);
    if (size > 0 && readSync(fd, last, 0, 1, size - 1) === 1 && last[0] !== 0x0a) appendFileSync(path, "\n");
  } catch {
    // No file yet, or one that cannot be read: the stream opens (or reports) it.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
