// A move that carries spend (a model call's tokens and price, a tool's price) and fails because
// the session moved on is never lost without a sign: it is charged to the session when the session
// ended, and otherwise counted in loopguard_session_late_spend_total and logged as a warning, so an
// operator sees spend that a session's usage does not show. A real SQLite store, the orchestrator's
// own metrics and log hooks.
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

async function lateSpend(fate: string): Promise<number> {
  const metric = await registry.getSingleMetric("loopguard_session_late_spend_total")!.get();
  return metric.values.find((v) => v.labels.fate === fate)?.value ?? 0;
}

/** A session replica-a started and still runs (as it believes), and the copy of it replica-a holds. */
async function startedByA(id: string, ttlMs = 60_000) {
  const { session } = await store.create(newSession(id, { lease: { owner: "replica-a", ttlMs } }));
  return session;
}

describe("spend whose move failed because the session moved on", () => {
  it("is charged to the session when a cancel ended it, and counted as charged", async () => {
    const held = await startedByA("s-cancelled");
    await movesOf("operator").stop(held, "cancelled", "asked by mistake", { fenced: false });
    const move = movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, spend: SPEND });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    expect((await store.get("s-cancelled"))!.usage).toMatchObject({ tokens: 49, costMicros: 1234 });
    expect(await lateSpend("charged")).toBe(1);
    expect(logged).toEqual([]);
  });

  it("is not charged to a session another replica took over and runs, and says so: counted and logged", async () => {
    const held = await startedByA("s-taken-over", 1);
    await new Promise((resolve) => setTimeout(resolve, 5));
    const [claimed] = await store.claim("replica-b", 60_000, 10);
    expect(claimed?.id).toBe("s-taken-over");
    await movesOf("replica-b").move(claimed!, "TOOL_EXECUTING", { audit: { reason: "calling" } });
    const move = movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" }, spend: SPEND });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    // A live session's usage moves with its own run's transitions: the taken-over run's spend is not in it.
    expect((await store.get("s-taken-over"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
    expect(await lateSpend("session_live")).toBe(1);
    expect(logged).toEqual([
      expect.objectContaining({
        level: "warn",
        session_id: "s-taken-over",
        reason: "session_live",
        tokens: 49,
        cost_micros: 1234,
      }),
    ]);
  });

  it("that the store fails to take is counted and logged with the store's error, and the move's error stands", async () => {
    const held = await startedByA("s-store-failed");
    await movesOf("operator").stop(held, "cancelled", "asked by mistake", { fenced: false });
    // The real store, but its charge fails as in an outage (the move before it fails as stale on its own).
    const failing = new Proxy(store, {
      get(target, key) {
        if (key === "chargeEnded")
          return () => Promise.reject(new StoreUnavailableError("chargeEnded", new Error("connection refused")));
        const value = Reflect.get(target, key, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
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
    const held = await startedByA("s-no-spend");
    await movesOf("operator").stop(held, "cancelled", "asked by mistake", { fenced: false });
    const move = movesOf("replica-a").move(held, "TOOL_EXECUTING", { audit: { reason: "calling" } });
    await expect(move).rejects.toBeInstanceOf(StaleTransitionError);
    expect((await store.get("s-no-spend"))!.usage).toMatchObject({ tokens: 0, costMicros: 0 });
    expect(await registry.getSingleMetric("loopguard_session_late_spend_total")!.get()).toMatchObject({ values: [] });
  });
});
