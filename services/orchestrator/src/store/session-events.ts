// What the orchestrator waits on instead of polling the store: one subscription to the store's
// change events, fanned out to whoever follows a session (WatchSession streams, a cancel
// waiting for an irreversible call's outcome) and to whoever wants every event (the claim loop).
// A follower also reads again after a slow backstop interval without any event, so a change
// whose event was lost (a store connection down at the wrong moment) is still seen.
import type { SessionEvent, SessionStore } from "./session-store.js";

/** How long a follower waits without an event before it reads again anyway. */
export const EVENT_BACKSTOP_MS = 5000;

export interface SessionFollower {
  /**
   * Resolves once the session changed since the previous call (or since `follow`), or when
   * `maxWaitMs` passed (default: the backstop, ±20% so that followers spread their reads), or
   * when `signal` aborts. The caller then reads the session and decides.
   */
  next(signal?: AbortSignal, maxWaitMs?: number): Promise<void>;
  close(): void;
}

class Follower implements SessionFollower {
  #changed = false;
  #wake: (() => void) | undefined;

  constructor(
    private readonly backstopMs: number,
    private readonly onClose: (f: Follower) => void,
  ) {}

  changed(): void {
    this.#changed = true;
    this.#wake?.();
  }

  async next(signal?: AbortSignal, maxWaitMs?: number): Promise<void> {
    if (!this.#changed && !signal?.aborted) {
      const waitMs = maxWaitMs ?? this.backstopMs * (0.8 + 0.4 * Math.random());
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, waitMs);
        function done(): void {
          clearTimeout(timer);
          signal?.removeEventListener("abort", done);
          resolve();
        }
        this.#wake = done;
        signal?.addEventListener("abort", done, { once: true });
      });
      this.#wake = undefined;
    }
    this.#changed = false;
  }

  close(): void {
    this.#wake?.();
    this.onClose(this);
  }
}

export class SessionEvents {
  readonly #followers = new Map<string, Set<Follower>>();
  readonly #listeners = new Set<(event: SessionEvent) => void>();
  readonly #unsubscribe: () => void;

  constructor(
    store: SessionStore,
    private readonly backstopMs = EVENT_BACKSTOP_MS,
  ) {
    this.#unsubscribe = store.subscribe((event) => this.#dispatch(event));
  }

  /** Follows one session; subscribe before reading it, so that no change between the read and the wait is missed. */
  follow(id: string): SessionFollower {
    const follower = new Follower(this.backstopMs, (f) => {
      const set = this.#followers.get(id);
      set?.delete(f);
      if (set?.size === 0) this.#followers.delete(id);
    });
    const set = this.#followers.get(id) ?? new Set<Follower>();
    set.add(follower);
    this.#followers.set(id, set);
    return follower;
  }

  /** Hears every event; returns the function that stops it. */
  listen(listener: (event: SessionEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Sessions followed right now. */
  get followed(): number {
    return this.#followers.size;
  }

  #dispatch(event: SessionEvent): void {
    if (event.kind === "resync") {
      for (const set of this.#followers.values()) for (const f of set) f.changed();
    } else {
      for (const f of this.#followers.get(event.id) ?? []) f.changed();
    }
    for (const listener of this.#listeners) listener(event);
  }

  close(): void {
    this.#unsubscribe();
    for (const set of [...this.#followers.values()]) for (const f of [...set]) f.close();
    this.#listeners.clear();
  }
}
