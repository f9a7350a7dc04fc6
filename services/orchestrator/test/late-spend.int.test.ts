// A move that carries spend (a model call's tokens and price, a tool's price) and fails, because
// the session moved on or the store was out, never loses it without a sign: it is charged to the
// session when the session ended or another replica runs it (a tool call is sent again by that run
// and paid then), carried after an outage until the session is read again and then charged unless
// the move had committed (likewise a model's spend only), and otherwise counted in
// loopguard_session_late_spend_total and logged as a warning, so an operator sees spend that a
// session's usage does not show. A real SQLite store (an outage injected in front of it), the
// orchestrator's own metrics and log hooks.
import { join } from "node:path";
import { tempDir } from "@loopguard/test-kit";
import { createLogger } from "@loopguard/tool-sdk";
import { Registry } from "prom-client";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { TraceSink } from "../src/governance/trace-sink.js";
import { SessionMetrics } from "../src/governance/session-metrics.js";
import { sessionHooks } from "../src/session/hooks.js";
import { SessionMoves } from "../src/session/moves.js";
import { type SessionStore, type Spend, StaleTransitionError } from "../src/store/session-store.js";
import { SqliteSessionStore } from "../src/store/sqlite-session-store.js";
import { StoreUnavailableError } from "../src/store/store-errors.js";
import { newSession } from "./session-store.suite.js";

const SPEND: Spend = { tokens: 49, costMicros: 1234 };

let store: SqliteSessionStore;
let removeDir: () => void;
let registry: Registry;
let metrics: SessionMetrics;
let logged: Record<string, unknown>[];

beforeEach(async () => {
  const dir = tempDir("late-spend");
  removeDir = dir.remove;
  store = await SqliteSessionStore.open(join(dir.dir, "orchestrator.db"));
  registry = new Registry();
  metrics = new SessionMetrics(registry);
  logged = [];
});

afterEach(async () => {
  await store.close();
  removeDir();
});

/** The moves of the replica `owner`, on `on`, with the orchestrator's hooks on this test's registry and log. */
function movesOf(owner: string, on: SessionStore = store): SessionMoves {
  const log = createLogger({ service: "orchestrator", level: "warn", write: (line) => logged.push(JSON.parse(line)) });
  return new SessionMoves({
    store: on,
    traces: new TraceSink(on, undefined),
    owner,
    now: Date.now,
    ...sessionHooks(log, metrics),
  });
}

type Outages = Partial<Record<"transition" | "charge" | "auditTrail", "before" | "after" | "down">>;

/**
 * The real store, but the next call of each method in `outages` fails as in an outage: `before` it
 * reaches the database, or `after` it committed (PostgreSQL's connection lost before COMMIT's
 * answer came back); `down`: every call fails.
 */
function withOutage(outages: Outages): SessionStore {
  const failed = new Set<string | symbol>();
  return new Proxy(store, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      const when = outages[key as keyof Outages];
      if (typeof value !== "function") return value;
      if (when === undefined || failed.has(key)) return value.bind(target);
      return async (...args: unknown[]) => {
        if (when !== "down") failed.add(key);
        if (when === "after") await value.apply(target, args);
        throw new StoreUnavailableError(String(key), new Error("connection refused"));
      };
    },
  });
}

async function lateSpend(fate: string): Promise<number> {
  const metric = await registry.getSingleMetric("loopguard_session_late_spend_total")!.get();
  return metric.values.find((v) => v.labels.fate === fate)?.value ?? 0;
}

/** A session replica-a started and still runs (as it believes), and the copy of it replica-a holds. */
async function startedByA(id: string, ttlMs = 60_000) {
  const { session } = await store.create(newSession(id, { lease: { owner: "replica-a", ttlMs } }));
  return session;
}

/**
 * A session replica-b took over from replica-a (whose lease ran out) and moved on: the copy
 * replica-a still holds, and the one replica-b's run goes on from.
 */
async function takenOverFromA(id: string) {
  const held = await startedByA(id, 1);
  await new Promise((resolve) => setTimeout(resolve, 5));
  const [claimed] = await store.claim("replica-b", 60_000, 10);
  expect(claimed?.id).toBe(id);
  const runB = await movesOf("replica-b").move(claimed!, "TOOL_EXECUTING", { audit: { reason: "calling" } });
  return { held, runB };
}

/**
 * A session whose model answer replica-a's move could not write, because the store was out (before
 * the move reached it, unless `outages` says otherwise): the copy replica-a holds, and replica-a's
 * moves, which carry that spend until they settle it.
 */
async function carriedUnderA(id: string, outages: Outages = { transition: "before" }, ttlMs?: number) {
  const held = await startedByA(id, ttlMs);
  const moves = movesOf("replica-a", withOutage(outages));
  const usage = { ...held.usage, ...SPEND };
  const move = moves.move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, patch: { usage }, spend: SPEND });
  await expect(move).rejects.toBeInstanceOf(StoreUnavailableError);
  expect(await lateSpend("carried")).toBe(1);
  return { held, moves };
}

/** A session an operator cancelled while replica-a ran it; the copy replica-a still holds. */
async function cancelledUnderA(id: string) {
  const held = await startedByA(id);
  await movesOf("operator").stop(held, "cancelled", "asked by mistake", { fenced: false });
  return held;
}

describe("spend whose move failed because the session moved on", () => {
  it("is charged to the session when a cancel ended it, and counted as charged", async () => {
    const held = await cancelledUnderA("s-cancelled");
    const move = movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, spend: SPEND });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    expect((await store.get("s-cancelled"))!.usage).toMatchObject({ tokens: 49, costMicros: 1234 });
    expect(await lateSpend("charged")).toBe(1);
    expect(logged).toEqual([]);
  });

  it("is charged to a session another replica took over and runs, and that run's next move keeps the charge", async () => {
    const { held, runB } = await takenOverFromA("s-taken-over");
    const move = movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, spend: SPEND });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    expect((await store.get("s-taken-over"))!.usage).toMatchObject({ tokens: 49, costMicros: 1234 });
    expect(await lateSpend("charged")).toBe(1);
    expect(logged).toEqual([]);
    // replica-b's run goes on from the copy it had before the charge, and pays its own tool call's price.
    const observed = await movesOf("replica-b").move(runB, "OBSERVING", {
      audit: { reason: "observed" },
      patch: { usage: { ...runB.usage, toolCalls: 1, costMicros: runB.usage.costMicros + 100 } },
    });
    expect(observed.usage).toMatchObject({ toolCalls: 1, tokens: 49, costMicros: 1334 });
    expect((await store.get("s-taken-over"))!.usage).toEqual(observed.usage);
  });

  it("of a tool's answer is left to the run that took the session over: it sends the call again and pays for it, so nothing is logged", async () => {
    const { held } = await takenOverFromA("s-tool-taken-over");
    const observed = movesOf("replica-a").move(held, "THINKING", {
      audit: { reason: "observed" },
      spend: SPEND,
      spendReissued: true,
    });
    await expect(observed).rejects.toBeInstanceOf(StaleTransitionError);
    expect(await lateSpend("reissued")).toBe(1);
    expect(await lateSpend("charged")).toBe(0);
    expect((await store.get("s-tool-taken-over"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
    expect(logged).toEqual([]);
  });

  it("that the store fails to take is counted and logged with the store's error, and the move's error stands", async () => {
    const held = await cancelledUnderA("s-store-failed");
    // The real store, but its charge fails as in an outage (the move before it fails as stale on its own).
    const failing = withOutage({ charge: "before" });
    const move = movesOf("replica-a", failing).move(held, "TOOL_EXECUTING", {
      audit: { reason: "calling" },
      spend: SPEND,
    });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    expect(await lateSpend("store_failed")).toBe(1);
    expect(logged).toEqual([
      expect.objectContaining({
        level: "warn",
        session_id: "s-store-failed",
        reason: "store_failed",
        error_message: expect.stringContaining("connection refused"),
      }),
    ]);
  });

  it("is neither charged nor counted when the move carried none", async () => {
    const held = await cancelledUnderA("s-no-spend");
    const move = movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" } });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    expect((await store.get("s-no-spend"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
    // Every fate's series is there from the start, at 0 (alerts count its first occurrence), and stays there.
    const { values } = await registry.getSingleMetric("loopguard_session_late_spend_total")!.get();
    expect(values.map((v) => v.value)).toEqual([0, 0, 0, 0]);
  });

  describe("a move that meets a store outage", () => {
    it("carries its spend until the session is read again: the move did not commit, so it is charged once, before the run goes on", async () => {
      const { held, moves } = await carriedUnderA("s-outage");
      expect((await store.get("s-outage"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
      await moves.settle("s-outage");
      const resumed = (await store.get("s-outage"))!;
      expect(resumed).toMatchObject({ version: held.version, usage: SPEND });
      // The run goes on from what it read, and asks the model again: both answers are paid, once.
      const again: Spend = { tokens: 7, costMicros: 10 };
      const usage = { ...resumed.usage, tokens: 56, costMicros: 1244 };
      await moves.move(resumed, "TOOL_EXECUTING", { audit: { reason: "calling" }, patch: { usage }, spend: again });
      await moves.settle("s-outage");
      expect((await store.get("s-outage"))!.usage).toMatchObject({ tokens: 56, costMicros: 1244 });
      expect(await lateSpend("charged")).toBe(0);
      expect(logged).toEqual([]);
    });

    it("carries nothing of a tool's price: the call is sent again under its id and paid for when observed", async () => {
      const held = await startedByA("s-tool-outage");
      const moves = movesOf("replica-a", withOutage({ transition: "before" }));
      const observed = moves.move(held, "TOOL_EXECUTING", {
        audit: { reason: "observed" },
        spend: SPEND,
        spendReissued: true,
      });
      await expect(observed).rejects.toBeInstanceOf(StoreUnavailableError);
      await moves.settle("s-tool-outage");
      expect((await store.get("s-tool-outage"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
      expect(await lateSpend("carried")).toBe(0);
      expect(await lateSpend("reissued")).toBe(1);
      expect(logged).toEqual([]);
    });

    it("is not charged twice when the move committed before the outage cut its answer off, even once others moved the session on", async () => {
      const { moves } = await carriedUnderA("s-committed", { transition: "after" });
      const committed = (await store.get("s-committed"))!;
      expect(committed.usage).toMatchObject(SPEND);
      await movesOf("operator").stop(committed, "cancelled", "asked by mistake", { fenced: false });
      await moves.settle("s-committed");
      expect((await store.get("s-committed"))!.usage).toMatchObject(SPEND);
    });

    it("charges the ended session when a cancel, on this replica or another, ended it before the run read it again", async () => {
      const { held, moves } = await carriedUnderA("s-cancelled-after-outage");
      await movesOf("replica-b").stop(held, "cancelled", "asked by mistake", { fenced: false });
      await moves.settle("s-cancelled-after-outage");
      expect((await store.get("s-cancelled-after-outage"))!).toMatchObject({ state: "CANCELLED", usage: SPEND });
      expect(logged).toEqual([]);
    });

    it("charges the live session when another replica took it over and moved it on during the outage", async () => {
      const { moves } = await carriedUnderA("s-taken-during-outage", { transition: "before" }, 1);
      await new Promise((resolve) => setTimeout(resolve, 5));
      const [claimed] = await store.claim("replica-b", 60_000, 10);
      const runB = await movesOf("replica-b").move(claimed!, "TOOL_EXECUTING", { audit: { reason: "calling" } });
      await moves.settle("s-taken-during-outage", { last: true });
      expect((await store.get("s-taken-during-outage"))!).toMatchObject({
        state: "TOOL_EXECUTING",
        version: runB.version,
        usage: SPEND,
      });
    });

    it("keeps carrying while the store is still out, and charges once it answers", async () => {
      const { moves } = await carriedUnderA("s-long-outage", { transition: "before", auditTrail: "before" });
      await expect(moves.settle("s-long-outage")).rejects.toBeInstanceOf(StoreUnavailableError);
      expect((await store.get("s-long-outage"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
      await moves.settle("s-long-outage");
      expect((await store.get("s-long-outage"))!.usage).toMatchObject(SPEND);
    });

    it("counts and logs the spend when the run ends before the store answers again", async () => {
      const { moves } = await carriedUnderA("s-run-ended", { transition: "before", auditTrail: "down" });
      await moves.settle("s-run-ended", { last: true });
      expect((await store.get("s-run-ended"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
      expect(await lateSpend("store_failed")).toBe(1);
      expect(logged).toEqual([
        expect.objectContaining({ session_id: "s-run-ended", reason: "store_failed", tokens: 49, cost_micros: 1234 }),
      ]);
      // Settled once: nothing is left to count again.
      await moves.settle("s-run-ended", { last: true });
      expect(await lateSpend("store_failed")).toBe(1);
    });
  });
});
