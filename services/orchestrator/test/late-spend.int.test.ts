// A move that carries spend (a model call's tokens and price, a tool's price) and fails, because
// the session moved on or the store was out, never loses it without a sign: it is charged to the
// session when the session ended or another replica runs it (a tool call is sent again by that run
// and paid then), carried to the session's next move after an outage (likewise a model's spend
// only), and otherwise counted in loopguard_session_late_spend_total and logged as a warning, so
// an operator sees spend that a session's usage does not show. A real SQLite store (an outage
// injected in front of it), the orchestrator's own metrics and log hooks.
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

/**
 * The real store, but the next call of `method` fails as in an outage: `before` it reaches the
 * database, or `after` it committed (PostgreSQL's connection lost before COMMIT's answer came back).
 */
function withOutage(method: "transition" | "charge", when: "before" | "after"): SessionStore {
  let failed = false;
  const outage = () => new StoreUnavailableError(method, new Error("connection refused"));
  return new Proxy(store, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      if (typeof value !== "function") return value;
      if (key !== method || failed) return value.bind(target);
      return async (...args: unknown[]) => {
        failed = true;
        if (when === "after") await value.apply(target, args);
        throw outage();
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
 * A session whose model answer replica-a's move could not write, because the store was out before
 * the move reached it: the copy replica-a holds, and replica-a's moves, which carry that spend.
 */
async function carriedUnderA(id: string) {
  const held = await startedByA(id);
  const moves = movesOf("replica-a", withOutage("transition", "before"));
  const move = moves.move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, spend: SPEND });
  await expect(move).rejects.toBeInstanceOf(StoreUnavailableError);
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
    const failing = withOutage("charge", "before");
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
    expect(await registry.getSingleMetric("loopguard_session_late_spend_total")!.get()).toMatchObject({ values: [] });
  });

  describe("a move that meets a store outage", () => {
    it("carries its spend to the session's next move from the same version: both spends are charged once", async () => {
      const { held, moves } = await carriedUnderA("s-outage");
      expect(await lateSpend("carried")).toBe(1);
      // The session waited for the store and goes on from what it holds: the same version, nothing charged yet.
      const resumed = (await store.get("s-outage"))!;
      expect(resumed.version).toBe(held.version);
      expect(resumed.usage).toMatchObject({ tokens: 0, costMicros: 0 });
      // Its next move (the model asked again) charges its own spend and the carried one.
      const again: Spend = { tokens: 7, costMicros: 10 };
      const usage = { ...resumed.usage, tokens: again.tokens, costMicros: again.costMicros };
      await moves.move(resumed, "TOOL_EXECUTING", { audit: { reason: "calling" }, patch: { usage }, spend: again });
      expect((await store.get("s-outage"))!.usage).toMatchObject({ tokens: 56, costMicros: 1244 });
      // Carried once: the move after that charges nothing more.
      const moved = (await store.get("s-outage"))!;
      await moves.move(moved, "OBSERVING", { audit: { reason: "observed" } });
      expect((await store.get("s-outage"))!.usage).toMatchObject({ tokens: 56, costMicros: 1244 });
      expect(logged).toEqual([]);
    });

    it("carries nothing of a tool's price: the call is sent again under its id and paid for when observed", async () => {
      const held = await startedByA("s-tool-outage");
      const moves = movesOf("replica-a", withOutage("transition", "before"));
      const observed = moves.move(held, "TOOL_EXECUTING", {
        audit: { reason: "observed" },
        spend: SPEND,
        spendReissued: true,
      });
      await expect(observed).rejects.toBeInstanceOf(StoreUnavailableError);
      await moves.move(held, "TOOL_EXECUTING", { audit: { reason: "calling again" } });
      expect((await store.get("s-tool-outage"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
      expect(await lateSpend("carried")).toBe(0);
      expect(await lateSpend("reissued")).toBe(1);
      expect(logged).toEqual([]);
    });

    it("is not charged twice when the move committed before the outage cut its answer off", async () => {
      const held = await startedByA("s-committed");
      const moves = movesOf("replica-a", withOutage("transition", "after"));
      const usage = { ...held.usage, ...SPEND };
      const move = moves.move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, patch: { usage }, spend: SPEND });
      await expect(move).rejects.toBeInstanceOf(StoreUnavailableError);
      const resumed = (await store.get("s-committed"))!;
      expect(resumed.version).toBeGreaterThan(held.version);
      await moves.move(resumed, "OBSERVING", { audit: { reason: "observed" } });
      expect((await store.get("s-committed"))!.usage).toMatchObject(SPEND);
    });

    it("charges the carried spend to a cancel made from the same version before the session's run went on", async () => {
      const { held, moves } = await carriedUnderA("s-cancelled-after-outage");
      await moves.stop(held, "cancelled", "asked by mistake", { fenced: false });
      expect((await store.get("s-cancelled-after-outage"))!).toMatchObject({ state: "CANCELLED", usage: SPEND });
    });

    it("charges the carried spend to the live session when a cancel took it but the run's own move committed first", async () => {
      const { held, moves } = await carriedUnderA("s-cancel-lost-race");
      // The run's move, sent again after the outage, commits before the cancel that took the carried spend.
      await movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" } });
      await expect(moves.stop(held, "cancelled", "asked by mistake", { fenced: false })).rejects.toBeInstanceOf(
        StaleTransitionError,
      );
      expect((await store.get("s-cancel-lost-race"))!).toMatchObject({ state: "TOOL_EXECUTING", usage: SPEND });
      expect(await lateSpend("charged")).toBe(1);
      expect(logged).toEqual([]);
    });
  });
});
