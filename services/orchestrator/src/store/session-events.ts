// What the orchestrator waits on instead of polling the store: one subscription to the store's
// change events, fanned out to whoever follows a session (WatchSession streams, a cancel
// waiting for an irreversible call's outcome) and to whoever wants every event (the claim loop).
// A follower has no timer of its own, so 10,000 waiting streams cost nothing while nothing
// changes. Events the store may have lost (its PostgreSQL LISTEN connection replaced) arrive as
// one "resync", which wakes every follower once. Beyond that, one slow backstop timer for all
// followers wakes those not woken for a backstop period, a bounded number a tick, oldest first:
// a safety net for a loss nobody signalled, which must not itself become polling at scale.
import type { SessionEvent, SessionStore } from "./session-store.js";

/** How long a follower waits without being woken before the shared backstop wakes it. */
export const EVENT_BACKSTOP_MS = 30_000;
/** How often the shared backstop looks for followers left waiting that long. */
export const BACKSTOP_TICK_MS = 1000;
/** At most this many followers woken by one backstop tick, so that reads never come all at once. */
export const BACKSTOP_WAKES_PER_TICK = 50;

export interface SessionFollower {
  /**
   * Resolves once the session changed since the previous call (or since `follow`), or the store
   * may have lost events, or the shared backstop wakes this follower, or `maxWaitMs` passed (a
   * timer of the caller's own, for the rare waits that need a deadline), or `signal` aborts.
   * The caller then reads the session and decides.
   */
  next(signal?: AbortSignal, maxWaitMs?: number): Promise<void>;
  close(): void;
}

class Follower implements SessionFollower {
  #changed = false;
  #wake: (() => void) | undefined;
  /** When this follower was last woken (or began), for the shared backstop. */
  wokenAt: number;

  constructor(
    now: number,
    private readonly onWake: (f: Follower) => void,
    private readonly onClose: (f: Follower) => void,
  ) {
    this.wokenAt = now;
  }

  changed(): void {
    this.#changed = true;
    this.onWake(this);
    this.#wake?.();
  }

  async next(signal?: AbortSignal, maxWaitMs?: number): Promise<void> {
    if (!this.#changed && !signal?.aborted) {
      await new Promise<void>((resolve) => {
        const timer = maxWaitMs === undefined ? undefined : setTimeout(done, maxWaitMs);
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

export interface BackstopOptions {
  readonly periodMs?: number;
  readonly tickMs?: number;
  readonly wakesPerTick?: number;
}

export class SessionEvents {
  readonly #followers = new Map<string, Set<Follower>>();
  /** Every follower, least recently woken first (a woken one is moved to the end). */
  readonly #byWake = new Set<Follower>();
  readonly #listeners = new Set<(event: SessionEvent) => void>();
  readonly #unsubscribe: () => void;
  readonly #periodMs: number;
  readonly #tickMs: number;
  readonly #wakesPerTick: number;
  #backstop: NodeJS.Timeout | undefined;

  constructor(store: SessionStore, backstop: BackstopOptions = {}) {
    this.#periodMs = backstop.periodMs ?? EVENT_BACKSTOP_MS;
    this.#tickMs = backstop.tickMs ?? BACKSTOP_TICK_MS;
    this.#wakesPerTick = backstop.wakesPerTick ?? BACKSTOP_WAKES_PER_TICK;
    this.#unsubscribe = store.subscribe((event) => this.#dispatch(event));
  }

  /** Follows one session; subscribe before reading it, so that no change between the read and the wait is missed. */
  follow(id: string): SessionFollower {
    const follower = new Follower(
      Date.now(),
      (f) => this.#woken(f),
      (f) => {
        this.#byWake.delete(f);
        const set = this.#followers.get(id);
        set?.delete(f);
        if (set?.size === 0) this.#followers.delete(id);
        if (this.#byWake.size === 0) this.#stopBackstop();
      },
    );
    const set = this.#followers.get(id) ?? new Set<Follower>();
    set.add(follower);
    this.#followers.set(id, set);
    this.#byWake.add(follower);
    this.#backstop ??= setInterval(() => this.#backstopTick(), this.#tickMs).unref();
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

  #woken(f: Follower): void {
    f.wokenAt = Date.now();
    this.#byWake.delete(f);
    this.#byWake.add(f);
  }

  #backstopTick(): void {
    const staleBefore = Date.now() - this.#periodMs;
    const stale: Follower[] = [];
    for (const f of this.#byWake) {
      if (f.wokenAt > staleBefore || stale.length >= this.#wakesPerTick) break;
      stale.push(f);
    }
    for (const f of stale) f.changed();
  }

  #stopBackstop(): void {
    clearInterval(this.#backstop);
    this.#backstop = undefined;
  }

  #dispatch(event: SessionEvent): void {
    if (event.kind === "resync") {
      for (const f of [...this.#byWake]) f.changed();
    } else {
      for (const f of this.#followers.get(event.id) ?? []) f.changed();
    }
    for (const listener of this.#listeners) listener(event);
  }

  close(): void {
    this.#unsubscribe();
    this.#stopBackstop();
    for (const f of [...this.#byWake]) f.close();
    this.#listeners.clear();
  }
}
