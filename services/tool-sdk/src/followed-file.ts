// A key file followed at run time: looked at (one stat) at most once a second, when the keys are
// needed, and re-read when it changed. A file that does not parse keeps what was read before, so a
// half-edited or broken file never leaves a service with no keys. Kubernetes updates a mounted
// Secret by swapping a symlink, which changes the inode the stat sees.
import { readFileSync, statSync } from "node:fs";

const CHECK_EVERY_MS = 1000;

/** What happened when a followed file changed: it was taken, or why the new content was not. */
export type FileReload<T> = { readonly value: T } | { readonly error: string };

export class FollowedFile<T> {
  readonly #file: string;
  readonly #parse: (value: unknown) => T;
  readonly #onReload: (outcome: FileReload<T>) => void;
  #value: T;
  /** inode, size and mtime of the file when last read; unset so that the first check reads it. */
  #stamp: string | undefined;
  #nextCheck = 0;

  /** `initial`: the value read at start (a start with a bad file already failed); `parse` throws on content it refuses. */
  constructor(file: string, initial: T, parse: (value: unknown) => T, onReload: (outcome: FileReload<T>) => void) {
    this.#file = file;
    this.#value = initial;
    this.#parse = parse;
    this.#onReload = onReload;
  }

  /** The value as of the last check; checks the file when a second has passed since. */
  current(now = Date.now()): T {
    if (now >= this.#nextCheck) this.#check(now);
    return this.#value;
  }

  #check(now: number): void {
    this.#nextCheck = now + CHECK_EVERY_MS;
    let stamp: string;
    try {
      const stat = statSync(this.#file);
      stamp = `${stat.ino}:${stat.size}:${stat.mtimeMs}`;
    } catch (error) {
      stamp = `unreadable:${(error as NodeJS.ErrnoException).code ?? "error"}`;
    }
    if (stamp === this.#stamp) return;
    const first = this.#stamp === undefined;
    this.#stamp = stamp;
    let value: T;
    try {
      value = this.#parse(JSON.parse(readFileSync(this.#file, "utf8")));
    } catch (error) {
      const why = error instanceof SyntaxError ? "not JSON" : (error as Error).message;
      this.#onReload({ error: `${this.#file}: ${why}; the keys read before stay` });
      return;
    }
    this.#value = value;
    // The first read only confirms what the service started with (unless the file changed since).
    if (!first) this.#onReload({ value });
  }
}
