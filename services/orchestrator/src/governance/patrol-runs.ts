// Patrol runs (`pnpm patrol`, the golden set run end to end): recorded through the API, kept in
// the session store so every replica and every restart sees the same last run, and exported as
// the loopguard_patrol_* gauges, read from the store at scrape time. No run yet: no samples, so a
// dashboard shows "no patrol run yet" rather than a made-up 0.
import { randomUUID } from "node:crypto";
import { create, fromJson, type JsonObject as ProtoJson, type MessageInitShape, toJson } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  type ListPatrolRunsRequest,
  type ListPatrolRunsResponseSchema,
  type PatrolRun,
  PatrolRunSchema,
  type RecordPatrolRunRequest,
  type RecordPatrolRunResponseSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type CallContext, status, ToolError } from "@loopguard/tool-sdk";
import { Gauge, type Registry } from "prom-client";
import type { Viewer } from "../api/session-access.js";
import type { JsonObject, SessionStore } from "../store/session-store.js";

const DEFAULT_LISTED = 20;

function runOf(row: { readonly run: JsonObject }): PatrolRun {
  return fromJson(PatrolRunSchema, row.run as ProtoJson, { ignoreUnknownFields: true });
}

/**
 * How far past the orchestrator's clock a run may say it finished (the patrol's host clock may be a
 * little ahead). Runs are ordered by when they finished: one stamped days ahead would stand as the
 * last run until then, hiding every later run from the gauges and PatrolRunMissing.
 */
export const PATROL_CLOCK_AHEAD_MS = 60_000;

/** What the request's figures say that its validation rules cannot: passed within tasks, the ratio theirs, finished by now. */
function inconsistency(run: PatrolRun, now: number): { field: string; description: string } | undefined {
  if (run.passed > run.tasks)
    return { field: "run.passed", description: `is ${run.passed}, more than run.tasks (${run.tasks})` };
  if (Math.abs(run.successRatio - run.passed / run.tasks) > 1e-6) {
    return {
      field: "run.success_ratio",
      description: `is ${run.successRatio}, not run.passed / run.tasks (${run.passed}/${run.tasks})`,
    };
  }
  const finished = timestampMs(run.finishedAt!);
  if (finished < timestampMs(run.startedAt!))
    return { field: "run.finished_at", description: "is before run.started_at" };
  if (finished > now + PATROL_CLOCK_AHEAD_MS) {
    return {
      field: "run.finished_at",
      description: `is ${new Date(finished).toISOString()}, more than ${PATROL_CLOCK_AHEAD_MS / 1000} s past the orchestrator's clock (${new Date(now).toISOString()}): check the patrol host's clock`,
    };
  }
  return undefined;
}

export async function recordPatrolRun(
  store: SessionStore,
  req: RecordPatrolRunRequest,
  ctx: CallContext,
  now: number = Date.now(),
): Promise<MessageInitShape<typeof RecordPatrolRunResponseSchema>> {
  const given = req.run!;
  const problem = inconsistency(given, now);
  if (problem)
    throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", `${problem.field} ${problem.description}`, {
      fieldViolations: [problem],
    });
  // The id and the recorder are the orchestrator's, never the caller's word.
  const run = create(PatrolRunSchema, { ...given, runId: `pr_${randomUUID()}`, recordedBy: ctx.caller.subject });
  const [previous] = await store.patrolRuns(1);
  await store.recordPatrolRun({
    runId: run.runId,
    finishedAt: timestampMs(run.finishedAt!),
    run: toJson(PatrolRunSchema, run) as JsonObject,
  });
  return { run, ...(previous ? { previous: runOf(previous) } : {}) };
}

/**
 * The latest runs. A mismatch's session id is shown only to the run's recorder and to admins: to
 * anyone else that session is one they cannot read, and must not learn of (GetSession answers them
 * NOT_FOUND).
 */
export async function listPatrolRuns(
  store: SessionStore,
  req: ListPatrolRunsRequest,
  viewer: Viewer,
): Promise<MessageInitShape<typeof ListPatrolRunsResponseSchema>> {
  const runs = (await store.patrolRuns(req.limit || DEFAULT_LISTED)).map(runOf);
  for (const run of runs)
    if (!viewer.admin && run.recordedBy !== viewer.subject) for (const m of run.mismatches) m.sessionId = "";
  return { runs };
}

/** The last run's figures as gauges; a store that cannot answer leaves the last figures in place. */
export function registerPatrolMetrics(registry: Registry, store: SessionStore): void {
  let last: PatrolRun | undefined;
  let reading: Promise<void> | undefined;
  // One store read per scrape, shared by every gauge the scrape collects.
  const refresh = (): Promise<void> =>
    (reading ??= store
      .patrolRuns(1)
      .then(([row]) => {
        if (row) last = runOf(row);
      })
      .catch(() => undefined)
      .finally(() => {
        reading = undefined;
      }));
  // Labelled by the golden set (its file's hash) so that no run yet means no sample: prom-client
  // gives an unlabelled gauge a 0, which would read as a run in 1970 and a success ratio of 0.
  const gauge = (name: string, help: string, value: (run: PatrolRun) => number): void => {
    new Gauge({
      name,
      help,
      labelNames: ["golden_set"],
      registers: [registry],
      async collect() {
        await refresh();
        this.reset();
        if (last) this.set({ golden_set: last.tasksSha256.slice(0, 12) || "unnamed" }, value(last));
      },
    });
  };
  gauge(
    "loopguard_patrol_success_ratio",
    "Share of the golden set's tasks whose session matched the expectation, last patrol run (0..1).",
    (r) => r.successRatio,
  );
  gauge(
    "loopguard_patrol_threshold",
    "The success ratio the last patrol run was judged by (0..1).",
    (r) => r.threshold,
  );
  gauge("loopguard_patrol_tasks", "Tasks in the last patrol run.", (r) => r.tasks);
  gauge(
    "loopguard_patrol_mismatches",
    "Tasks of the last patrol run whose session did not match the expectation.",
    (r) => r.tasks - r.passed,
  );
  gauge(
    "loopguard_patrol_last_run_timestamp_seconds",
    "When the last patrol run finished (Unix seconds).",
    (r) => timestampMs(r.finishedAt!) / 1000,
  );
  gauge(
    "loopguard_patrol_p95_latency_seconds",
    "p95 of the last patrol run's session latencies.",
    (r) => r.p95LatencyMs / 1000,
  );
  gauge(
    "loopguard_patrol_cost_micros",
    "What the last patrol run's sessions cost, in micros of the budget's currency.",
    (r) => Number(r.costMicros),
  );
  gauge("loopguard_patrol_dry_run", "1 when the last patrol run moved no money (every money call a dry run).", (r) =>
    r.dryRun ? 1 : 0,
  );
}
