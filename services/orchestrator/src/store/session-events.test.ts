import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { SessionEvents, type SessionFollower } from "./session-events.js";
import { SessionListeners } from "./session-store-support.js";
import type { SessionStore } from "./session-store.js";

/** A store that only delivers events: SessionEvents needs nothing else of it. */
function eventSource(): { store: SessionStore; listeners: SessionListeners } {
  const listeners = new SessionListeners();
  return { store: { subscribe: (listener) => listeners.add(listener) } as SessionStore, listeners };
}

/** Starts one wait on each follower; `woken` holds the indexes of those whose wait resolved. */
function waitOnAll(followers: SessionFollower[]): Set<number> {
  const woken = new Set<number>();
  followers.forEach((f, i) => void f.next().then(() => woken.add(i)));
  return woken;
}

describe("SessionEvents", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("keeps one timer for 1,000 waiting followers, not one each", async () => {
    const { store } = eventSource();
    const events = new SessionEvents(store);
    const followers = Array.from({ length: 1000 }, (_, i) => events.follow(`s${i}`));
    waitOnAll(followers);
    await Promise.resolve();
    expect(vi.getTimerCount()).toBe(1);
    for (const f of followers) f.close();
    expect(vi.getTimerCount()).toBe(0);
    events.close();
  });

  it("wakes only the followers of the session that changed", async () => {
    const { store, listeners } = eventSource();
    const events = new SessionEvents(store);
    const followers = ["a", "b"].map((id) => events.follow(id));
    const woken = waitOnAll(followers);
    listeners.emit({ kind: "changed", id: "b", version: 1, state: "THINKING", leaseOwner: null });
    await vi.advanceTimersByTimeAsync(0);
    expect([...woken]).toEqual([1]);
    events.close();
  });

  it("wakes every follower once when the store may have lost events", async () => {
    const { store, listeners } = eventSource();
    const events = new SessionEvents(store);
    const followers = Array.from({ length: 1000 }, (_, i) => events.follow(`s${i}`));
    const woken = waitOnAll(followers);
    listeners.emit({ kind: "resync" });
    await vi.advanceTimersByTimeAsync(0);
    expect(woken.size).toBe(1000);
    events.close();
  });

  it("wakes a follower left waiting past the backstop period, a bounded number a tick, oldest first", async () => {
    const { store } = eventSource();
    const events = new SessionEvents(store, { periodMs: 10_000, tickMs: 1000, wakesPerTick: 3 });
    const followers = Array.from({ length: 10 }, (_, i) => events.follow(`s${i}`));
    const woken = waitOnAll(followers);
    await vi.advanceTimersByTimeAsync(9000);
    expect(woken.size).toBe(0);
    await vi.advanceTimersByTimeAsync(1000);
    expect([...woken]).toEqual([0, 1, 2]);
    await vi.advanceTimersByTimeAsync(1000);
    expect(woken.size).toBe(6);
    await vi.advanceTimersByTimeAsync(2000);
    expect(woken.size).toBe(10);
    events.close();
  });

  it("lets the backstop skip a follower an event woke recently", async () => {
    const { store, listeners } = eventSource();
    const events = new SessionEvents(store, { periodMs: 10_000, tickMs: 1000, wakesPerTick: 100 });
    const [a, b] = ["a", "b"].map((id) => events.follow(id)) as [SessionFollower, SessionFollower];
    const woken: string[] = [];
    void b.next().then(() => woken.push("b"));
    await vi.advanceTimersByTimeAsync(5000);
    listeners.emit({ kind: "changed", id: "a", version: 1, state: "THINKING", leaseOwner: null });
    await a.next();
    void a.next().then(() => woken.push("a"));
    await vi.advanceTimersByTimeAsync(5000);
    expect(woken).toEqual(["b"]);
    await vi.advanceTimersByTimeAsync(5000);
    expect(woken).toEqual(["b", "a"]);
    events.close();
  });

  it("still ends a wait given its own deadline", async () => {
    const { store } = eventSource();
    const events = new SessionEvents(store);
    const woken = new Set<number>();
    void events
      .follow("a")
      .next(undefined, 2000)
      .then(() => woken.add(0));
    await vi.advanceTimersByTimeAsync(2000);
    expect(woken.size).toBe(1);
    events.close();
  });
});
