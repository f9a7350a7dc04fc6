// Opening a SQLite file the way every loopguard store does: its folder created 0700 and the file
// 0600 before SQLite touches them (SQLite creates files 0644 and its -wal/-shm files copy the
// database file's mode), WAL, a busy timeout. The files hold refunds, sessions and customer
// keys: no other local user has any business reading them.
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Database from "better-sqlite3";

export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

export interface SqliteOptions {
  /** NORMAL survives a process crash; FULL also survives power loss (about 0.5 ms per commit). */
  readonly synchronous?: "NORMAL" | "FULL";
  /** How long a writer waits for another connection's lock before SQLITE_BUSY. */
  readonly busyTimeoutMs?: number;
  readonly foreignKeys?: boolean;
}

/** Creates `dir` (and missing parents) readable by its owner only; an existing folder is left as it is. */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
}

/** Files made by earlier builds were 0644: tighten the ones this process owns. */
function tighten(file: string): void {
  if (!existsSync(file)) return;
  const stat = statSync(file);
  if ((stat.mode & 0o077) !== 0 && stat.uid === process.getuid?.()) chmodSync(file, PRIVATE_FILE_MODE);
}

/** Makes sure `file` and its folder exist and are private, so SQLite opens rather than creates it. */
export function preparePrivateSqliteFile(file: string): void {
  ensurePrivateDir(dirname(file));
  // "a" creates the file without truncating one that another process created a moment ago.
  closeSync(openSync(file, "a", PRIVATE_FILE_MODE));
  for (const path of [file, `${file}-wal`, `${file}-shm`]) tighten(path);
}

/** Opens (creating it privately if missing) a SQLite database in WAL mode; ":memory:" is private to the connection. */
export function openSqlite(file: string, options: SqliteOptions = {}): Database.Database {
  if (file !== ":memory:") preparePrivateSqliteFile(file);
  const db = new Database(file);
  try {
    db.pragma("journal_mode = WAL");
    db.pragma(`synchronous = ${options.synchronous ?? "NORMAL"}`);
    db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`);
    if (options.foreignKeys) db.pragma("foreign_keys = ON");
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}

/** SQLite failures that say "the database cannot be used right now", not "this request is wrong". */
export function isSqliteUnavailable(error: unknown): boolean {
  if (!(error instanceof Database.SqliteError)) return false;
  return /^SQLITE_(BUSY|LOCKED|IOERR|FULL|CANTOPEN|READONLY|PROTOCOL|NOMEM)/.test(error.code);
}

/** SQLITE_BUSY: another connection holds the lock this one needs. */
export function isSqliteBusy(error: unknown): boolean {
  return error instanceof Database.SqliteError && error.code.startsWith("SQLITE_BUSY");
}

/** The longest pause between two tries of a locked write. */
const MAX_LOCK_PAUSE_MS = 50;

/**
 * Runs `work` (one transaction, on a connection whose busy_timeout is 0) and, while another
 * connection holds the lock it needs, runs it again after short awaited pauses, for up to
 * `timeoutMs`; then throws the last SQLITE_BUSY. SQLite's own busy_timeout waits inside the call,
 * and better-sqlite3 calls are synchronous: that wait stops the whole process (every call, its
 * health check) for as long. Written by hand: neither library waits for a lock without blocking.
 */
export async function retryWhileBusy<T>(work: () => T, timeoutMs: number): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (let pause = 1; ; pause = Math.min(pause * 2, MAX_LOCK_PAUSE_MS)) {
    try {
      return work();
    } catch (error) {
      const left = deadline - performance.now();
      if (!isSqliteBusy(error) || left <= 0) throw error;
      await sleep(Math.min(pause, left));
    }
  }
}
