// Writing a key or secret file so that a reader never sees half of it and its mode is the one asked
// for: a fresh temporary file of our own (never a stale or planted one followed), then a rename.
import { randomBytes } from "node:crypto";
import { closeSync, fchmodSync, fsyncSync, linkSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/** A file that could not be written; the message names it and why, in one line. */
export class FileWriteError extends Error {
  override readonly name = "FileWriteError";
}

/** "no such file or directory" from Node's "ENOENT: no such file or directory, open '…'". */
function reason(error: unknown): string {
  const { code, message } = error as NodeJS.ErrnoException;
  const meaning = code && typeof message === "string" ? message.match(/^[A-Z]+: ([^,]+),/)?.[1] : undefined;
  return meaning ? `${meaning} (${code})` : (code ?? "write failed");
}

/**
 * Writes `text` to `path` whole with exactly `mode` (umask aside), through a temporary file opened
 * exclusively beside it. `replace: false` refuses an existing `path` (EEXIST) instead of replacing
 * it. On any failure the temporary file is gone and a FileWriteError names `path`.
 */
export function writeFileAtomically(path: string, text: string, mode: number, replace = true): void {
  const tmp = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  let fd: number | undefined;
  let created = false;
  try {
    fd = openSync(tmp, "wx", mode);
    created = true;
    fchmodSync(fd, mode);
    writeSync(fd, text);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    if (replace) renameSync(tmp, path);
    else linkSync(tmp, path);
  } catch (error) {
    if (fd !== undefined) closeSync(fd);
    throw new FileWriteError(`cannot write ${path}: ${reason(error)}`);
  } finally {
    if (created) rmSync(tmp, { force: true });
  }
}
