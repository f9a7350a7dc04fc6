// What the dashboard's views show, as orchestrator.v1 messages: the overview counts, the tool
// panel, the approval queue and a session's detail panel. Handlers in api-handlers.ts serve them.
import type { DescService, MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type {
  GetOverviewResponseSchema,
  GetSessionDetailResponseSchema,
  ListApprovalsResponseSchema,
  ListToolStatsResponseSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { ToolClient } from "@loopguard/tool-sdk";
import type { Registry } from "prom-client";
import { servedView } from "../guard/personal-data-served.js";
import { toProtoSession, wallClockUsed } from "./session-message.js";
import type { LogTail } from "./log-tail.js";
import type { Orchestrator } from "../session/orchestrator.js";
import { readerOf, type Viewer } from "./session-access.js";
import { sessionTraceId } from "../session/trace-id.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import type { TimeSeries } from "./time-series.js";
import { toolStats } from "./tool-stats.js";

export interface DashboardSources {
  readonly orchestrator: Orchestrator;
  /** The store's clock (storeClock), on which a live session's wall clock is shown as its budget counts it. */
  readonly now: () => number;
  /** The registry the tool clients' metrics live in (ServerMetrics.registry). */
  readonly registry: Registry;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  /** This process's recent log lines by session; absent, the detail has none. */
  readonly logTail?: LogTail | undefined;
  /** The sampled series the plots show (time-series.ts); absent, they are empty. */
  readonly series?: TimeSeries | undefined;
}

/** The approval queue shows this many sessions at most; `more` says when others wait. */
const APPROVALS_SHOWN = 200;

/**
 * The sessions `viewer` may list, counted by state: its own (and every waiting one for an approver),
 * or all for sessions:admin. How many this replica drives now counts every caller's: admins only.
 */
export async function overview(
  { orchestrator }: DashboardSources,
  viewer: Viewer,
): Promise<MessageInitShape<typeof GetOverviewResponseSchema>> {
  const counts = await orchestrator.store.countByState(readerOf(viewer));
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  return {
    counts,
    total,
    approvalsWaiting: counts.AWAITING_APPROVAL,
    activeHere: viewer.admin ? orchestrator.activeCount() : 0,
    at: timestampFromMs(Date.now()),
  };
}

export async function toolPanel({
  registry,
  clients,
}: DashboardSources): Promise<MessageInitShape<typeof ListToolStatsResponseSchema>> {
  const tools = await toolStats(registry, clients);
  return { tools: tools.map((t) => ({ ...t, p50Ms: t.p50Ms ?? undefined, p95Ms: t.p95Ms ?? undefined })) };
}

export async function approvalQueue(
  { orchestrator, now }: DashboardSources,
  viewer: Viewer,
): Promise<MessageInitShape<typeof ListApprovalsResponseSchema>> {
  const page = await orchestrator.list("AWAITING_APPROVAL", APPROVALS_SHOWN, undefined, viewer);
  const at = now();
  return {
    approvals: page.sessions.map((s) => toProtoSession(s, { now: at, withTask: false })),
    more: page.nextCursor !== null,
  };
}

function budgetRows(s: SessionRecord, now: number): { name: string; used: number; limit: number; left: number }[] {
  const row = (name: string, used: number, limit: number) => ({ name, used, limit, left: Math.max(0, limit - used) });
  return [
    row("steps", s.usage.steps, s.budget.maxSteps),
    row("tool_calls", s.usage.toolCalls, s.budget.maxToolCalls),
    row("tokens", s.usage.tokens, s.budget.maxTokens),
    row("cost_micros", s.usage.costMicros, s.budget.maxCostMicros),
    row("wall_clock_ms", wallClockUsed(s, now), s.budget.deadlineMs),
  ];
}

export async function sessionDetail(
  { orchestrator, logTail, now }: DashboardSources,
  id: string,
  viewer: Viewer,
): Promise<MessageInitShape<typeof GetSessionDetailResponseSchema>> {
  const [s, [trail, steps]] = await orchestrator.readAlong(id, viewer, () =>
    Promise.all([orchestrator.store.auditTrail(id), orchestrator.store.steps(id)]),
  );
  // The audit trail's words (the model's tool names, the answer a stop repeats) and records written
  // before their writer masked the task's own numbers (trace-sink.ts) are masked here.
  const served = servedView(s.task);
  const at = now();
  return {
    session: toProtoSession(s, { now: at }),
    budget: budgetRows(s, at),
    transitions: trail.map((a) => ({
      version: a.version,
      from: a.from,
      to: a.to,
      at: timestampFromMs(a.at),
      reason: a.reason === null ? undefined : served.stored(a.reason),
      tool: a.tool === null ? undefined : served.stored(a.tool),
      outcome: a.outcome === null ? undefined : served.stored(a.outcome),
      argsHash: a.argsHash ?? undefined,
      expectedTimeoutMs: a.expectedTimeoutMs ?? undefined,
    })),
    steps: steps.map((step) => ({
      step: step.step,
      at: timestampFromMs(step.at),
      record: served.storedValue(step.payload),
    })),
    logs: (logTail?.linesFor(s.id, sessionTraceId(s)) ?? []) as JsonObject[],
  };
}
