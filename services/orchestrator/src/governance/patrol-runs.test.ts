// A patrol run is recorded as its figures say, but never one stamped in the future: runs are ordered
// by when they finished, so one from a host whose clock is days ahead would stand as the last run
// and hide every later one from the gauges (and PatrolRunMissing). A real SQLite store.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  ListPatrolRunsRequestSchema,
  PatrolMismatchSchema,
  RecordPatrolRunRequestSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type CallContext, ToolError } from "@loopguard/tool-sdk";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { SqliteSessionStore } from "../store/sqlite-session-store.js";
import type { Viewer } from "../api/session-access.js";
import { listPatrolRuns, PATROL_CLOCK_AHEAD_MS, recordPatrolRun, registerPatrolMetrics } from "./patrol-runs.js";

const TASKS = 101;
const ctx = { caller: { subject: "operator" } } as unknown as CallContext;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const clean of cleanups.splice(0).reverse()) await clean();
});

async function store(): Promise<SqliteSessionStore> {
  const dir = mkdtempSync(join(tmpdir(), "patrol-runs-"));
  const opened = await SqliteSessionStore.open(join(dir, "sessions.db"));
  cleanups.push(
    () => rmSync(dir, { recursive: true, force: true }),
    () => opened.close(),
  );
  return opened;
}

/** A run of TASKS tasks, `passed` of them passed, that finished at `finishedMs`. */
function run(finishedMs: number, passed: number) {
  return create(RecordPatrolRunRequestSchema, {
    run: {
      startedAt: timestampFromMs(finishedMs - 60_000),
      finishedAt: timestampFromMs(finishedMs),
      tasks: TASKS,
      passed,
      successRatio: passed / TASKS,
      threshold: 0.95,
      tasksSha256: "a".repeat(64),
      dryRun: true,
    },
  });
}

describe("recording a patrol run", () => {
  it("refuses one that finished more than a minute past the orchestrator's clock, naming the field; the next real run is the last", async () => {
    const runs = await store();
    const registry = new Registry();
    registerPatrolMetrics(registry, runs);
    const now = Date.now();
    const refused = await recordPatrolRun(runs, run(now + 30 * 86_400_000, TASKS), ctx, now).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ToolError);
    expect((refused as ToolError).message).toMatch(
      /^run\.finished_at is .*, more than 60 s past the orchestrator's clock/,
    );
    expect((refused as ToolError).fieldViolations).toEqual([
      { field: "run.finished_at", description: expect.any(String) },
    ]);
    expect(await runs.patrolRuns(5)).toEqual([]);

    // A host clock a little ahead is allowed.
    await recordPatrolRun(runs, run(now + PATROL_CLOCK_AHEAD_MS - 1000, TASKS), ctx, now);
    await recordPatrolRun(runs, run(now + PATROL_CLOCK_AHEAD_MS, 40), ctx, now + 5000);
    const ratio = (await registry.getSingleMetric("loopguard_patrol_success_ratio")!.get()).values[0]!.value;
    expect(ratio).toBeCloseTo(40 / TASKS, 6);
  });
});

describe("listing patrol runs", () => {
  it("shows a mismatch's session id to the run's recorder and to admins only", async () => {
    const runs = await store();
    const now = Date.now();
    const request = run(now, TASKS - 1);
    request.run!.mismatches = [
      create(PatrolMismatchSchema, {
        taskId: "q1",
        expected: "succeeded",
        got: "not_done deadline",
        sessionId: "ses_1",
      }),
    ];
    await recordPatrolRun(runs, request, ctx, now);
    const shown = async (viewer: Viewer) =>
      ((await listPatrolRuns(runs, create(ListPatrolRunsRequestSchema, {}), viewer)).runs ?? []).map((r) =>
        (r.mismatches ?? []).map((m) => [m.taskId, m.sessionId]),
      );
    expect(await shown({ subject: "operator", admin: false, approver: false })).toEqual([[["q1", "ses_1"]]]);
    expect(await shown({ subject: "root", admin: true, approver: false })).toEqual([[["q1", "ses_1"]]]);
    expect(await shown({ subject: "stranger", admin: false, approver: true })).toEqual([[["q1", ""]]]);
  });
});
