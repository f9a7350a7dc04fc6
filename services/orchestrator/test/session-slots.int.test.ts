// ORCHESTRATOR_MAX_ACTIVE_SESSIONS is one count for the three ways a replica takes sessions: a
// StartSession it creates leased to itself, a claim, a wake of parked sessions. A claim or a wake
// waiting on the store holds the slots it asked for, so sessions started meanwhile do not take
// them too. A real SQLite store whose claim or wake answers only when the test lets it, and a
// runner that drives a session until it is stopped.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { createLogger } from "@loopguard/tool-sdk";
import { afterEach, describe, expect, it } from "vitest";
import { SessionDriver } from "../src/session/driver.js";
import type { HumanDeps } from "../src/session/human.js";
import type { SessionMoves } from "../src/session/moves.js";
import type { SessionRunner } from "../src/session/runner.js";
import type { SessionEvents } from "../src/store/session-events.js";
import { openSessionStore } from "../src/store/open-store.js";
import type { SessionRecord, SessionStore } from "../src/store/session-store.js";
import { ToolRegistry } from "../src/tool-registry.js";
import { newSession } from "./session-store.suite.js";
import { movesAt } from "./store-move.js";

const OWNER = "replica-a";
const TTL_MS = 30_000;
const SLOTS = 2;

/** Something the test lets go of when it is ready. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}

/**
 * `store`, but its first `operation` (claim or wake) takes its sessions at once and answers only
 * once `answer` opens, as a store round trip that is slow to come back; `asked` opens when it has taken them.
 */
function slowToAnswer(store: SessionStore, operation: "claim" | "wake") {
  const asked = gate();
  const answer = gate();
  let first = true;
  const held = async (...args: unknown[]) => {
    const taken = await (store[operation] as (...a: unknown[]) => Promise<SessionRecord[]>)(...args);
    if (first) {
      first = false;
      asked.open();
      await answer.wait;
    }
    return taken;
  };
  const wrapped = new Proxy(store, {
    get(target, prop) {
      if (prop === operation) return held;
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { store: wrapped, asked: asked.wait, answer: answer.open };
}

/** A runner that drives a session until its run is stopped. */
const runner = {
  run: (_id: string, signal: AbortSignal) =>
    new Promise<null>((resolve) => signal.addEventListener("abort", () => resolve(null), { once: true })),
} as unknown as SessionRunner;

let dir: string;
const clock = Date.parse("2026-12-05T12:00:00Z");
const cleanUps: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const clean of cleanUps.splice(0).reverse()) await clean();
  rmSync(dir, { recursive: true, force: true });
});

async function openStore(): Promise<SessionStore> {
  dir = mkdtempSync(join(tmpdir(), "loopguard-slots-"));
  const store = await openSessionStore(`sqlite:${join(dir, "sessions.db")}`, { now: () => clock });
  cleanUps.push(() => store.close());
  return store;
}

function startDriver(store: SessionStore): SessionDriver {
  const driver = new SessionDriver(
    {
      store,
      owner: OWNER,
      registry: new ToolRegistry(),
      clients: new Map(),
      now: () => clock,
      log: createLogger({ service: "orchestrator", level: "error", write: () => undefined }),
      leaseTtlMs: TTL_MS,
      maxActiveSessions: SLOTS,
      // Only the claim at start and the ones the test asks for.
      claimIntervalMs: 600_000,
      approvalSweepMs: 600_000,
    },
    {
      runner,
      moves: { settle: async () => undefined, stop: async (s: SessionRecord) => s } as unknown as SessionMoves,
      human: {} as HumanDeps,
      events: { listen: () => () => undefined } as unknown as SessionEvents,
    },
  );
  driver.start();
  cleanUps.push(() => driver.stop());
  return driver;
}

/** StartSession of session `id` on the driver: created leased to it when it has a free slot. */
function start(driver: SessionDriver, store: SessionStore, id: string) {
  return driver.admit((leased) =>
    store.create(newSession(id, leased ? { lease: { owner: OWNER, ttlMs: TTL_MS } } : {})),
  );
}

/** The sessions among `ids` leased to this replica. */
async function leasedHere(store: SessionStore, ids: readonly string[]): Promise<string[]> {
  const sessions = await Promise.all(ids.map((id) => store.get(id)));
  return sessions.filter((s) => s?.leaseOwner === OWNER).map((s) => s!.id);
}

/** The most sessions `driver` drove at once while `during` ran, and a little after. */
async function mostActive(driver: SessionDriver, during: () => Promise<void>): Promise<number> {
  let most = 0;
  const sample = setInterval(() => {
    most = Math.max(most, driver.activeCount());
  }, 1);
  try {
    await during();
    await sleep(100);
  } finally {
    clearInterval(sample);
  }
  return Math.max(most, driver.activeCount());
}

describe("a replica's slots, shared by StartSession, claims and wakes", () => {
  it("a claim waiting on the store holds its slots: sessions started meanwhile are created unleased, never driven beyond them", async () => {
    const real = await openStore();
    for (const id of ["waiting-1", "waiting-2"]) await real.create(newSession(id));
    const { store, asked, answer } = slowToAnswer(real, "claim");
    const driver = startDriver(store);

    let started: { session: SessionRecord }[] = [];
    const most = await mostActive(driver, async () => {
      await asked;
      started = await Promise.all(["started-1", "started-2"].map((id) => start(driver, store, id)));
      answer();
    });

    expect(most).toBe(SLOTS);
    expect(started.map((r) => r.session.leaseOwner)).toEqual([null, null]);
    const all = ["waiting-1", "waiting-2", "started-1", "started-2"];
    expect(await leasedHere(real, all)).toEqual(["waiting-1", "waiting-2"]);
  });

  it("the slots a claim did not fill are free again once it answers", async () => {
    const real = await openStore();
    await real.create(newSession("waiting-1"));
    const { store, asked, answer } = slowToAnswer(real, "claim");
    const driver = startDriver(store);

    await asked;
    expect((await start(driver, store, "during-claim")).session.leaseOwner).toBeNull();
    answer();
    await sleep(50);
    expect(driver.activeCount()).toBe(1);
    expect((await start(driver, store, "after-claim")).session.leaseOwner).toBe(OWNER);
    expect((await start(driver, store, "when-full")).session.leaseOwner).toBeNull();
    expect(driver.activeCount()).toBe(SLOTS);
    const all = ["waiting-1", "during-claim", "after-claim", "when-full"];
    expect(await leasedHere(real, all)).toEqual(["waiting-1", "after-claim"]);
  });

  it("a wake of parked sessions waiting on the store holds its slots the same way", async () => {
    const real = await openStore();
    const move = movesAt(() => clock);
    const parked = ["parked-1", "parked-2"];
    for (const id of parked) {
      await real.create(newSession(id, { lease: { owner: "replica-b", ttlMs: TTL_MS } }));
      await move(real, id, "IDLE", "THINKING", 0, { owner: "replica-b" });
      await move(real, id, "THINKING", "PARKED", 1, {
        owner: "replica-b",
        patch: {
          pending: {
            queue: [],
            park: {
              tool: "billing",
              reason: "UNAVAILABLE",
              wakeAt: clock - 1,
              parkedAt: clock - 10,
              since: clock - 10,
              attempts: 1,
            },
          },
        },
      });
    }
    const { store, asked, answer } = slowToAnswer(real, "wake");
    const driver = startDriver(store);

    let started: { session: SessionRecord }[] = [];
    const most = await mostActive(driver, async () => {
      await asked;
      started = await Promise.all(["started-1", "started-2"].map((id) => start(driver, store, id)));
      answer();
    });

    expect(most).toBe(SLOTS);
    expect(started.map((r) => r.session.leaseOwner)).toEqual([null, null]);
    expect(await leasedHere(real, [...parked, "started-1", "started-2"])).toEqual(parked);
  });

  it("a claim that answers after the replica began to stop lets the leases it took go at once, driving none", async () => {
    const real = await openStore();
    for (const id of ["waiting-1", "waiting-2"]) await real.create(newSession(id));
    const { store, asked, answer } = slowToAnswer(real, "claim");
    const driver = startDriver(store);

    await asked;
    const stopped = driver.stop();
    answer();
    await stopped;

    expect(driver.activeCount()).toBe(0);
    expect(await leasedHere(real, ["waiting-1", "waiting-2"])).toEqual([]);
  });
});
