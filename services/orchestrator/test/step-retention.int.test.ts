// Step-row retention against real stores: a SQLite file and a PostgreSQL 15 server of the test's own.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "@loopguard/tool-sdk";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { openSessionStore } from "../src/store/open-store.js";
import type { SessionState } from "../src/session/session-state.js";
import type { SessionStore } from "../src/store/session-store.js";
import { StepRetention } from "../src/governance/step-retention.js";
import { newSession } from "./session-store.suite.js";

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 11, 1, 12);
const OLD = NOW - 40 * DAY;
const RECENT = NOW - 2 * DAY;

const postgres = usePostgres("orchestrator");

/** A session whose steps were written at `stepsAt`, left in THINKING or ended in `end`. */
async function sessionWithSteps(
  store: SessionStore,
  id: string,
  stepsAt: readonly number[],
  end?: SessionState,
): Promise<void> {
  await store.create(newSession(id));
  let from: SessionState = "IDLE";
  let version = 0;
  for (const [i, at] of stepsAt.entries()) {
    await store.transition({
      id,
      from,
      to: "THINKING",
      expectedVersion: version++,
      audit: { at },
      step: { step: i + 1, at, payload: { i } },
    });
    from = "THINKING";
  }
  if (end)
    await store.transition({
      id,
      from,
      to: end,
      expectedVersion: version,
      audit: { at: NOW - DAY },
      patch: { stopReason: end === "CANCELLED" ? "cancelled" : "unrecoverable_error" },
    });
}

async function value(registry: Registry, name: string): Promise<number> {
  return (await registry.getSingleMetric(name)!.get()).values[0]?.value ?? Number.NaN;
}

function retention(store: SessionStore, registry: Registry, batch: number): StepRetention {
  const log = createLogger({ service: "orchestrator", level: "error", write: () => undefined });
  return new StepRetention({ store, days: 30, intervalMs: 3600_000, batch, registry, log, now: () => NOW });
}

const backends: {
  name: string;
  skip: string | null;
  open: () => Promise<{ store: SessionStore; another: () => Promise<SessionStore>; cleanup: () => void }>;
}[] = [
  {
    name: "sqlite",
    skip: null,
    async open() {
      const dir = mkdtempSync(join(tmpdir(), "loopguard-retention-"));
      const url = `sqlite:${join(dir, "sessions.db")}`;
      return {
        store: await openSessionStore(url),
        another: () => openSessionStore(url),
        cleanup: () => rmSync(dir, { recursive: true, force: true }),
      };
    },
  },
  {
    name: "postgres",
    skip: postgres.skip,
    async open() {
      const url = await postgres.freshDatabase();
      return { store: await openSessionStore(url), another: () => openSessionStore(url), cleanup: () => undefined };
    },
  },
];

for (const backend of backends) {
  describe.skipIf(backend.skip !== null)(`step retention on ${backend.name}`, () => {
    it("deletes ended sessions' step rows older than the window in batches, never a live session's, and reports it", async () => {
      const { store, cleanup } = await backend.open();
      try {
        await sessionWithSteps(store, "ended-old", [OLD, OLD + 1, RECENT], "FAILED");
        await sessionWithSteps(store, "live-old", [OLD - 5, OLD]);
        await sessionWithSteps(store, "ended-recent", [RECENT, RECENT + 1], "CANCELLED");
        const registry = new Registry();
        // A batch of one: the pass must go on until a batch comes back short.
        expect(await retention(store, registry, 1).run()).toBe(2);
        expect((await store.steps("ended-old")).map((s) => s.step)).toEqual([3]);
        expect((await store.steps("live-old")).map((s) => s.step)).toEqual([1, 2]);
        expect((await store.steps("ended-recent")).map((s) => s.step)).toEqual([1, 2]);
        expect(await value(registry, "loopguard_step_rows_deleted_total")).toBe(2);
        expect(await value(registry, "loopguard_step_retention_last_run_timestamp_seconds")).toBe(NOW / 1000);
        // The live session's oldest row is kept, and is what the age reports.
        expect(await value(registry, "loopguard_step_oldest_row_age_seconds")).toBe((NOW - (OLD - 5)) / 1000);
        expect(await retention(store, new Registry(), 1).run()).toBe(0);
      } finally {
        await store.close();
        cleanup();
      }
    });

    it("two replicas pruning at once delete every expired row exactly once", async () => {
      const { store, another, cleanup } = await backend.open();
      const other = await another();
      try {
        for (let i = 0; i < 40; i++) await sessionWithSteps(store, `s${i}`, [OLD, OLD + 1, OLD + 2], "FAILED");
        const [a, b] = await Promise.all([
          retention(store, new Registry(), 7).run(),
          retention(other, new Registry(), 7).run(),
        ]);
        expect(a + b).toBe(120);
        expect(await store.oldestStepAt()).toBeNull();
      } finally {
        await other.close();
        await store.close();
        cleanup();
      }
    });
  });
}
