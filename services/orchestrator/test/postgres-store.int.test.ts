import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { errorOf } from "@loopguard/test-kit";
import { startTcpProxy } from "@loopguard/sql-store/testing";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { afterEach, describe, expect, it } from "vitest";
import { openSessionStore } from "../src/store/open-store.js";
import type { PostgresSessionStoreOptions } from "../src/store/postgres-session-store.js";
import type { MoneyChange } from "../src/store/effect-reservations.js";
import { lockNamesOf, RESERVE_LOCK } from "../src/store/postgres-reservations.js";
import { CREATOR_QUOTA } from "../src/store/postgres-session-sql.js";
import { bind } from "../src/store/postgres-session-statements.js";
import {
  LeaseLostError,
  type SessionEvent,
  SessionQuotaExceededError,
  type SessionStore,
  StaleTransitionError,
  StoreUnavailableError,
  type TransitionInput,
} from "../src/store/session-store.js";
import { LIMITS, reservation } from "./effect-reservations.suite.js";
import { describeSessionStore, newSession as session } from "./session-store.suite.js";

const postgres = usePostgres("orchestrator");

/** The database's clock, by which the store measures leases. */
async function databaseNow(client: pg.Client): Promise<number> {
  const { rows } = await client.query<{ ms: string }>(
    `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms`,
  );
  return Number(rows[0]!.ms);
}

describeSessionStore(
  "postgres",
  async ({ now }) => {
    const url = await postgres.freshDatabase();
    const store = await openSessionStore(url, { now });
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    return {
      store,
      elapse: (ms) => sleep(ms),
      leaseNow: () => databaseNow(raw),
      openAnother: () => openSessionStore(url, { now }),
      async exec(sql) {
        await raw.query(sql);
      },
      async close() {
        await store.close();
        await raw.end();
      },
    };
  },
  postgres.skip ? { skip: postgres.skip } : { sharedEvents: true },
);

describe.skipIf(postgres.skip !== null)("postgres session store: database time, timeouts, notifications", () => {
  const opened: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    for (const c of opened.splice(0).reverse()) await c.close();
  });

  async function fresh(): Promise<{ url: string; raw: pg.Client }> {
    const url = await postgres.freshDatabase();
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    opened.push({ close: () => raw.end() });
    return { url, raw };
  }

  async function open(url: string, options: PostgresSessionStoreOptions = {}): Promise<SessionStore> {
    const store = await openSessionStore(url, options);
    opened.push(store);
    return store;
  }

  it("measures leases by the database's clock: a replica an hour ahead cannot take a live lease, one an hour behind cannot keep an expired one", async () => {
    const { url } = await fresh();
    const hour = 3_600_000;
    const ahead = await open(url, { now: () => Date.now() + hour });
    const behind = await open(url, { now: () => Date.now() - hour });
    await behind.create(session("s1"));
    const [claimed] = await behind.claim("behind", 300, 10);
    expect(claimed?.leaseOwner).toBe("behind");
    expect(claimed!.leaseExpiresAt! - Date.now()).toBeLessThan(1000);
    // By its own clock the lease ran out an hour ago; by the database's it is live.
    expect(await ahead.claim("ahead", 60_000, 10)).toEqual([]);
    await sleep(400);
    // By its own clock the lease has an hour left; by the database's it is over.
    expect((await behind.renewLeases(["s1"], "behind", 300)).has("s1")).toBe(false);
    await expect(
      behind.transition({
        id: "s1",
        from: "IDLE",
        to: "THINKING",
        expectedVersion: 0,
        owner: "behind",
        audit: { at: Date.now() },
      }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    expect((await ahead.claim("ahead", 60_000, 10)).map((s) => s.leaseOwner)).toEqual(["ahead"]);
  });

  it("gives up on a statement after its timeout, as StoreUnavailableError (told to onUnavailable), instead of waiting on a lock", async () => {
    const { url, raw } = await fresh();
    const told: StoreUnavailableError[] = [];
    const store = await open(url, { statementTimeoutMs: 300, onUnavailable: (e) => told.push(e) });
    await store.create(session("s1"));
    await raw.query("BEGIN");
    await raw.query("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE");
    const started = Date.now();
    const error = await errorOf(store.get("s1"));
    const waited = Date.now() - started;
    await raw.query("ROLLBACK");
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).operation).toBe("get");
    expect(told).toEqual([error]);
    expect(waited).toBeGreaterThanOrEqual(250);
    expect(waited).toBeLessThan(5000);
    expect((await store.get("s1"))?.id).toBe("s1");
  });

  /**
   * A store with a pool of 3 whose `burst` waits on a lock that `raw` holds, as another replica inside the same kind
   * of transaction would: another caller's start and another session's move still go through on that pool.
   */
  async function heldBurst(
    lock: pg.QueryConfig,
    burst: (store: SessionStore) => Promise<unknown>[],
  ): Promise<{ store: SessionStore; outcomes: unknown[] }> {
    const { url, raw } = await fresh();
    // A burst that held the whole pool would leave the others waiting for a connection until the
    // connect timeout, then failing: 2 s, under the lock's statement timeout, and longer than a
    // connection takes on a loaded machine (300 ms once timed out opening the store in CI).
    const store = await open(url, { maxConnections: 3, connectTimeoutMs: 2000, statementTimeoutMs: 3000 });
    await store.create(session("s0", { createdBy: "cli:bob" }));
    await raw.query("BEGIN");
    await raw.query(lock);
    const waiting = burst(store);
    await sleep(100);
    const [carol, moved] = await Promise.all([
      store.create(session("c1", { createdBy: "cli:carol", maxInFlight: 5 })),
      store.transition({ id: "s0", from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } }),
    ]);
    expect([carol.created, moved.state, (await store.get("s0"))?.state]).toEqual([true, "THINKING", "THINKING"]);
    await raw.query("ROLLBACK");
    return { store, outcomes: await Promise.all(waiting) };
  }

  it("one caller's burst of starts holds one pooled connection, not the pool: while another replica holds its lock, other callers' work goes on and the burst still makes exactly the quota", async () => {
    const { outcomes } = await heldBurst(bind(CREATOR_QUOTA.lock, { createdBy: "cli:burst" }), (store) =>
      Array.from({ length: 12 }, (_, i) =>
        store.create(session(`b${i}`, { createdBy: "cli:burst", maxInFlight: 5 })).then(
          () => "made",
          (e: unknown) => (e instanceof SessionQuotaExceededError ? "refused" : e),
        ),
      ),
    );
    expect([outcomes.filter((o) => o === "made").length, outcomes.filter((o) => o === "refused").length]).toEqual([
      5, 7,
    ]);
  });

  it("a burst of reserves on one customer holds one pooled connection, not the pool: while another replica holds the customer's lock, other work goes on, then every reserve within the limits is held", async () => {
    const reserve = (id: string): MoneyChange => ({
      reserve: reservation(id, { entityId: `ord_${id}`, amount: 1_000 }),
      limits: LIMITS,
    });
    const ids = Array.from({ length: 10 }, (_, i) => `r${i}`);
    const customerLock = lockNamesOf(reserve("r0")).at(-1)!;
    expect(customerLock).toBe("customer:cust_1:USD");
    const { store, outcomes } = await heldBurst(bind(RESERVE_LOCK, { name: customerLock }), (store) =>
      ids.map(async (id) => {
        await store.create(session(id));
        await store.transition({ id, from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } });
        const at = { at: Date.now() };
        return (
          await store.transition({
            id,
            from: "THINKING",
            to: "TOOL_EXECUTING",
            expectedVersion: 1,
            audit: at,
            money: reserve(id),
          })
        ).state;
      }),
    );
    expect(outcomes).toEqual(ids.map(() => "TOOL_EXECUTING"));
    expect((await store.reservations("r9")).map((r) => r.status)).toEqual(["held"]);
  });

  it("when another replica holds one caller's lock past lock_timeout, the caller's starts waiting behind the first fail with it at once (StoreUnavailableError), not one lock_timeout after another; its next start goes through once the lock is free", async () => {
    const { url, raw } = await fresh();
    const store = await open(url, { statementTimeoutMs: 500 });
    const start = (id: string) => store.create(session(id, { createdBy: "cli:burst", maxInFlight: 5 }));
    await raw.query("BEGIN");
    await raw.query(bind(CREATOR_QUOTA.lock, { createdBy: "cli:burst" }));
    const started = Date.now();
    const errors = await Promise.all(Array.from({ length: 8 }, (_, i) => errorOf(start(`b${i}`))));
    const waited = Date.now() - started;
    await raw.query("ROLLBACK");
    expect(errors.map((e) => e instanceof StoreUnavailableError)).toEqual(errors.map(() => true));
    // One lock_timeout for the whole burst; finding out one after another takes eight (4 s).
    expect(waited).toBeLessThan(2000);
    expect((await start("b8")).created).toBe(true);
  });

  it("when the network to the database goes silent, each burst of starts fails together within one timeout, not one start after another, for as long as it lasts; nothing of them is written, and the next start after it goes through", async () => {
    const { url, raw } = await fresh();
    const proxy = await startTcpProxy(Number(new URL(url).port));
    opened.push(proxy);
    const through = new URL(url);
    through.port = String(proxy.port);
    // A reply is given up on 1 s after the server's 300 ms timeouts: 1.3 s.
    const store = await open(through.toString(), { statementTimeoutMs: 300, connectTimeoutMs: 300 });
    const start = (id: string) => store.create(session(id, { createdBy: "cli:burst", maxInFlight: 50 }));
    expect((await start("before")).created).toBe(true);
    proxy.cut();
    const burst = async (round: number) => {
      const started = Date.now();
      const errors = await Promise.all(Array.from({ length: 8 }, (_, i) => errorOf(start(`r${round}-${i}`))));
      return { unavailable: errors.filter((e) => e instanceof StoreUnavailableError).length, ms: Date.now() - started };
    };
    const rounds = [await burst(1), await burst(2), await burst(3)];
    const moved = errorOf(
      store.transition({ id: "before", from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } }),
    );
    expect(await moved).toBeInstanceOf(StoreUnavailableError);
    proxy.restore();
    expect(rounds.map((r) => r.unavailable)).toEqual([8, 8, 8]);
    // The first burst waits one read timeout (1.3 s) on its pooled connection, the later ones one connect timeout
    // (0.3 s): each burst together. Finding out one start after another took 3.4 s, 2.4 s and 2.4 s.
    expect(rounds.map((r) => r.ms < (r === rounds[0] ? 2500 : 1500))).toEqual([true, true, true]);
    expect((await start("after")).created).toBe(true);
    const { rows } = await raw.query<{ id: string }>(`SELECT id FROM sessions ORDER BY id`);
    expect(rows.map((r) => r.id)).toEqual(["after", "before"]);
  });

  it("a start whose caller gave up while it waited for its turn is not made: it fails with the caller's reason, and the starts around it are made", async () => {
    const { url, raw } = await fresh();
    const store = await open(url);
    const start = (id: string, signal?: AbortSignal) =>
      store.create(session(id, { createdBy: "cli:burst", maxInFlight: 5, ...(signal ? { signal } : {}) }));
    await raw.query("BEGIN");
    await raw.query(bind(CREATOR_QUOTA.lock, { createdBy: "cli:burst" }));
    const first = start("b1");
    const caller = new AbortController();
    const abandoned = errorOf(start("b2", caller.signal));
    const third = start("b3");
    await sleep(100);
    caller.abort(new Error("the caller's deadline passed"));
    await raw.query("ROLLBACK");
    expect([(await first).created, ((await abandoned) as Error).message, (await third).created]).toEqual([
      true,
      "the caller's deadline passed",
      true,
    ]);
    expect(await store.get("b2")).toBeNull();
  });

  it("replaces a lost listening connection: subscribers are told to read again, then hear changes as before", async () => {
    const { url, raw } = await fresh();
    const store = await open(url, { listenCheckMs: 200 });
    const events: SessionEvent[] = [];
    const stop = store.subscribe((e) => events.push(e));
    const { rows } = await raw.query<{ n: string }>(
      `SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE application_name = 'loopguard-orchestrator-listen' AND datname = current_database()`,
    );
    expect(Number(rows[0]!.n)).toBe(1);
    for (let i = 0; i < 100 && !events.some((e) => e.kind === "resync"); i++) await sleep(50);
    expect(events.filter((e) => e.kind === "resync")).toHaveLength(1);
    await store.create(session("s1"));
    for (let i = 0; i < 100 && !events.some((e) => e.kind === "changed"); i++) await sleep(20);
    expect(events.find((e) => e.kind === "changed")).toEqual({
      kind: "changed",
      id: "s1",
      version: 0,
      state: "IDLE",
      leaseOwner: null,
    });
    stop();
  });

  /** A store whose statements, and the round trips they cost, are recorded. */
  async function counted(url: string): Promise<{ store: SessionStore; sent: string[]; trips: () => number }> {
    const sent: string[] = [];
    let trips = 0;
    const store = await open(url, {
      poolObserver: {
        sent: (kind, roundTrip) => {
          sent.push(kind);
          if (roundTrip) trips += 1;
        },
        acquired: () => undefined,
        released: () => undefined,
        use: () => undefined,
      },
    });
    return { store, sent, trips: () => trips };
  }

  const viaThinking = (expectedVersion: number): TransitionInput => ({
    id: "s1",
    from: "IDLE",
    to: "TOOL_EXECUTING",
    expectedVersion,
    via: [{ state: "THINKING", audit: { at: Date.now() } }],
    audit: { at: Date.now() },
  });

  it("sends a transaction's statements together: a create under a quota in 3 round trips, a move through `via` in 2, a lone move in 1", async () => {
    const { url } = await fresh();
    const { store, sent, trips } = await counted(url);
    const cost = async (work: () => Promise<unknown>) => {
      const [before, from] = [trips(), sent.length];
      await work();
      return { trips: trips() - before, sent: sent.slice(from) };
    };
    expect(await cost(() => store.create(session("s1", { maxInFlight: 5 })))).toEqual({
      trips: 3,
      sent: ["BEGIN", "lg_creator_lock", "lg_in_flight", "lg_session_insert", "COMMIT"],
    });
    expect(await cost(() => store.transition(viaThinking(0)))).toEqual({
      trips: 2,
      sent: ["BEGIN", "lg_transition", "lg_transition", "COMMIT"],
    });
    const move = { id: "s1", from: "TOOL_EXECUTING", to: "OBSERVING", expectedVersion: 2, audit: { at: Date.now() } };
    expect(await cost(() => store.transition(move as TransitionInput))).toEqual({ trips: 1, sent: ["lg_transition"] });
  });

  it("writes nothing of a move through `via` whose first move is stale, though its later move alone would apply", async () => {
    const { url } = await fresh();
    const { store } = await counted(url);
    await store.create(session("s1"));
    // As if an earlier attempt of this very move had committed its first hop and the reply was lost.
    await store.transition({ id: "s1", from: "IDLE", to: "THINKING", expectedVersion: 0, audit: { at: Date.now() } });
    await expect(store.transition(viaThinking(0))).rejects.toBeInstanceOf(StaleTransitionError);
    expect(await store.get("s1")).toMatchObject({ state: "THINKING", version: 1 });
    expect(await store.auditTrail("s1")).toHaveLength(1);
  });
});
