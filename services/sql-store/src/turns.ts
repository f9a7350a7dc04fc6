/**
 * Work under one key runs one at a time, in the order it came; work under other keys is not held
 * back. Written by hand: a promise chain per key is all it takes, and no keyed lock we know of
 * drops a key once its last holder is done.
 */
export class Turns<K> {
  private readonly last = new Map<K, Promise<unknown>>();

  /** Runs `work` once every earlier turn under `key` has settled, whether it succeeded or not. */
  async take<T>(key: K, work: () => Promise<T>): Promise<T> {
    const turn = (this.last.get(key) ?? Promise.resolve()).catch(() => undefined).then(work);
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
