// The host's live reads of one live session charged at once, from two replicas (two stores on one
// database) and by two readers of one: every charge lands, its retries with it, with no new version,
// and the session's next move, made from the record it had before them, keeps them all; a charge
// racing a move lands as well, and a read's retries are counted though the session ends before this
// replica moves it again. SessionMoves over a real SQLite file opened twice, and
// over a real PostgreSQL (skipped unless it can start; LOOPGUARD_REQUIRE_POSTGRES=1 requires it).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { afterEach, describe, expect, it } from "vitest";
import { TraceSink } from "../src/governance/trace-sink.js";
import { SessionMoves } from "../src/session/moves.js";
import { openSessionStore } from "../src/store/open-store.js";
import { type SessionStore, StaleTransitionError } from "../src/store/session-store.js";
import { newSession } from "./session-store.suite.js";

const postgres = usePostgres("orchestrator");
const opened: SessionStore[] = [];
const cleanUps: (() => void)[] = [];

afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
  for (const clean of cleanUps.splice(0)) clean();
});

/** A store URL on a fresh, empty database of the backend. */
const backends: Record<string, () => Promise<string>> = {
  sqlite: async () => {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-orch-"));
    cleanUps.push(() => rmSync(dir, { recursive: true, force: true }));
    return `sqlite:${join(dir, "sessions.db")}`;
  },
  postgres: () => postgres.freshDatabase(),
};

/** One replica (holding no lease: its moves here are unfenced): its own store on the database, and the moves it makes through it. */
async function replica(url: string, owner: string): Promise<SessionMoves> {
  const store = await openSessionStore(url);
  opened.push(store);
  return new SessionMoves({ store, traces: new TraceSink(store, undefined), owner, now: Date.now });
}

/** One live read of the reader's price, as readLive charges it. */
const READ = { tokens: 0, costMicros: 50, toolCalls: 1 };

describe.each(Object.keys(backends))("%s: the host's live reads charged at once", (backend) => {
  it.skipIf(backend === "postgres" && postgres.skip !== null)(
    "ten reads charged at once by two replicas, a move from the record before them, and a charge racing the next move: all land",
    async () => {
      const url = await backends[backend]!();
      const [a, b] = [await replica(url, "replica-a"), await replica(url, "replica-b")];
      const store = opened[0]!;
      await store.create(newSession("s1"));
      const idle = (await store.get("s1"))!;
      const before = await a.move(idle, "THINKING", { audit: { reason: "started" }, fenced: false });
      // Replica a's reads were each retried once: charged with them, at once.
      await Promise.all([
        ...Array.from({ length: 5 }, () => a.charge(before, { ...READ, retries: 1 })),
        ...Array.from({ length: 5 }, () => b.charge(before, READ)),
      ]);
      expect((await store.get("s1"))!).toMatchObject({
        version: before.version,
        usage: { ...before.usage, toolCalls: 10, costMicros: 500, retries: 5 },
      });
      const usage = { ...before.usage, steps: 1, toolCalls: before.usage.toolCalls + 1 };
      const started = await a.move(before, "TOOL_EXECUTING", {
        audit: { reason: "calling" },
        patch: { usage },
        fenced: false,
      });
      const expected = { ...usage, toolCalls: 11, costMicros: 500, retries: 5 };
      expect(started.usage).toEqual(expected);
      expect((await store.get("s1"))!.usage).toEqual(expected);
      await Promise.all([
        b.charge(started, READ),
        a.move(started, "OBSERVING", { audit: { reason: "answered" }, patch: { usage: started.usage }, fenced: false }),
      ]);
      expect((await store.get("s1"))!.usage).toEqual({ ...expected, toolCalls: 12, costMicros: 550 });
    },
  );

  it.skipIf(backend === "postgres" && postgres.skip !== null)(
    "a read's retries land with its charge, though another replica stops the session before this one moves it again",
    async () => {
      const url = await backends[backend]!();
      const [a, b] = [await replica(url, "replica-a"), await replica(url, "replica-b")];
      const store = opened[0]!;
      await store.create(newSession("s1"));
      const idle = (await store.get("s1"))!;
      const before = await a.move(idle, "THINKING", { audit: { reason: "started" }, fenced: false });
      await a.charge(before, { ...READ, retries: 2 });
      // Replica b ends the session from the same record, its stop adding a step of its own to the usage.
      const usage = { ...before.usage, steps: 1 };
      await b.stop(before, "cancelled", "cancelled on another replica", { fenced: false, patch: { usage } });
      const stale = a.move(before, "TOOL_EXECUTING", { audit: { reason: "calling" }, fenced: false });
      await expect(stale).rejects.toBeInstanceOf(StaleTransitionError);
      expect((await store.get("s1"))!).toMatchObject({
        state: "CANCELLED",
        usage: { ...usage, toolCalls: 1, costMicros: 50, retries: 2 },
      });
    },
  );
});
