export interface TurnsOptions {
  /**
   * Whether a turn's failure meets every turn waiting behind it under its key too (the database is
   * down, the key's lock cannot be had in time): those fail with it at once, without running, instead
   * of each finding out for itself one after another. Work that comes after them runs as usual.
   */
  readonly sharedFailure?: (error: unknown) => boolean;
}

/**
 * Work under one key runs one at a time, in the order it came; work under other keys is not held
 * back. Written by hand: a promise chain per key is all it takes, and no keyed lock we know of
 * drops a key once its last holder is done.
 */
export class Turns<K> {
  private readonly last = new Map<K, Promise<unknown>>();

  constructor(private readonly options: TurnsOptions = {}) {}

  /**
   * Runs `work` once every earlier turn under `key` has settled, whether it succeeded or not; when
   * the one before failed with a shared failure (see TurnsOptions), fails with it instead. Work whose
   * `signal` aborted while it waited (its caller gave up) does not run: it fails with the reason.
   */
  async take<T>(key: K, work: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const shared = this.options.sharedFailure;
    const run = () => {
      signal?.throwIfAborted();
      return work();
    };
    const turn = (this.last.get(key) ?? Promise.resolve()).then(run, (error: unknown) => {
      if (shared?.(error)) throw error;
      return run();
    });
    this.last.set(key, turn);
    try {
      return await turn;
    } finally {
      if (this.last.get(key) === turn) this.last.delete(key);
    }
  }

  /**
   * Runs `work` in the turn of each key, taken one after another in the order given. Takers that
   * always name keys in one order never wait on each other.
   */
  takeEach<T>(keys: readonly K[], work: () => Promise<T>): Promise<T> {
    const [first, ...rest] = keys;
    return first === undefined ? work() : this.take(first, () => this.takeEach(rest, work));
  }

  /** Keys with a turn running or waiting. */
  get size(): number {
    return this.last.size;
  }
}
