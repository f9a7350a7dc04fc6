// The gRPC API (loopguard.orchestrator.v1) over the Orchestrator: conversion between the
// contract's messages and session records, and orchestrator errors mapped to statuses.
import { type ServedView, servedView } from "../guard/personal-data-served.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type {
  OrchestratorService,
  WatchSessionResponseSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { status, ToolError, type ToolHandlers } from "@loopguard/tool-sdk";
import { approvalQueue, type DashboardSources, overview, sessionDetail, toolPanel } from "./dashboard-views.js";
import { OrchestratorError } from "./orchestrator-error.js";
import { fromProtoState, toProtoSession, toProtoState } from "./session-message.js";
import type { WatchEvent } from "../session/watch.js";
import { refusedGrant } from "../guard/grants.js";
import { startRequestHash, taskProblem } from "./start-request.js";
import { viewerOf } from "./session-access.js";
import { type JsonObject, SessionQuotaExceededError, StoreUnavailableError } from "../store/session-store.js";
import { listPatrolRuns, recordPatrolRun } from "../governance/patrol-runs.js";

/** How long a caller told the store is unavailable waits before trying again. */
const STORE_RETRY_AFTER_MS = 1000;
/** How long a caller at its session quota waits before trying again: about as long as a session takes to end. */
const QUOTA_RETRY_AFTER_MS = 5000;

/** The status a store outage gets on the API; the cause stays in the logs and loopguard_store_errors_total. */
export function storeUnavailable(error: StoreUnavailableError): ToolError {
  return new ToolError(
    status.UNAVAILABLE,
    "STORE_UNAVAILABLE",
    "the session store is unavailable right now; retry after the delay given",
    {
      retryAfterMs: STORE_RETRY_AFTER_MS,
      metadata: { operation: error.operation },
      cause: error,
    },
  );
}

function mapError(error: unknown): never {
  if (error instanceof StoreUnavailableError) throw storeUnavailable(error);
  if (error instanceof SessionQuotaExceededError) {
    throw new ToolError(
      status.RESOURCE_EXHAUSTED,
      "SESSION_QUOTA_EXCEEDED",
      `${error.message} (ORCHESTRATOR_MAX_SESSIONS_PER_CALLER); start more once some have ended`,
      {
        retryAfterMs: QUOTA_RETRY_AFTER_MS,
        metadata: { quota: "sessions_in_flight_per_caller", limit: String(error.limit) },
      },
    );
  }
  if (error instanceof OrchestratorError) {
    switch (error.reason) {
      case "SESSION_NOT_FOUND":
        throw new ToolError(status.NOT_FOUND, error.reason, error.message);
      case "UNKNOWN_POLICY":
        throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", error.message, {
          fieldViolations: [{ field: "policy", description: error.message }],
        });
      case "SELF_APPROVAL":
      case "NOT_SESSION_OWNER":
        throw new ToolError(status.PERMISSION_DENIED, error.reason, error.message);
      case "CALL_IN_FLIGHT":
        throw new ToolError(status.UNAVAILABLE, error.reason, error.message, { retryAfterMs: 1000 });
      default:
        throw new ToolError(status.FAILED_PRECONDITION, error.reason, error.message);
    }
  }
  if (error instanceof RangeError)
    throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", error.message, {
      fieldViolations: [{ field: "page_token", description: error.message }],
    });
  throw error;
}

/**
 * One WatchSession message of an event; the store's clock (`now`) is read only for a message that
 * shows the session. Steps and transitions are masked by the session's served view, as GetTrace and
 * GetSessionDetail mask them.
 */
function watchResponse(
  event: WatchEvent,
  now: () => number,
  served: ServedView,
): MessageInitShape<typeof WatchSessionResponseSchema> {
  if (event.kind === "snapshot" || event.kind === "update")
    return { event: { case: event.kind, value: toProtoSession(event.session, { now: now() }) } };
  if (event.kind === "step")
    return {
      event: { case: "step", value: { step: event.step.step, record: served.storedValue(event.step.payload) } },
    };
  const { audit } = event;
  return {
    event: {
      case: "transition",
      value: {
        from: toProtoState(audit.from),
        to: toProtoState(audit.to),
        version: BigInt(audit.version),
        reason: served.stored(audit.reason ?? ""),
        at: timestampFromMs(audit.at),
      },
    },
  };
}

export function createOrchestratorHandlers(sources: DashboardSources): ToolHandlers<typeof OrchestratorService> {
  const { orchestrator, now } = sources;
  return {
    async startSession(req, ctx) {
      const refused = refusedGrant(req.scopes, ctx.caller);
      if (refused)
        throw new ToolError(status.PERMISSION_DENIED, "SCOPE_NOT_GRANTABLE", refused.why, {
          metadata: { scope: refused.scope },
        });
      const task = (req.task ?? {}) as JsonObject;
      const problem = taskProblem(task);
      if (problem)
        throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", problem, {
          fieldViolations: [{ field: "task", description: problem }],
        });
      const requestHash = startRequestHash(req);
      const budget = req.budget;
      const result = await orchestrator
        .startSession({
          goal: req.goal,
          task,
          budget: {
            maxSteps: budget?.maxSteps ?? 0,
            maxToolCalls: budget?.maxToolCalls ?? 0,
            maxTokens: Number(budget?.maxTokens ?? 0n),
            deadlineMs: budget?.maxWallClockMs ?? 0,
            maxCostMicros: Number(budget?.maxCostMicros ?? 0n),
            maxRetries: budget?.maxRetries ?? 0,
          },
          scopes: req.scopes,
          policy: req.policy || "scripted",
          createdBy: ctx.caller.subject,
          requestHash,
          signal: ctx.signal,
          ...(req.idempotencyKey ? { idempotencyKey: req.idempotencyKey } : {}),
        })
        .catch(mapError);
      if (!result.created && result.session.requestHash !== requestHash) {
        throw new ToolError(
          status.ALREADY_EXISTS,
          "IDEMPOTENCY_KEY_REUSED",
          `idempotency key was used for session ${result.session.id} with another request`,
        );
      }
      return { session: toProtoSession(result.session, { now: now() }), created: result.created };
    },
    async getSession(req, ctx) {
      const session = await orchestrator.read(req.sessionId, viewerOf(ctx.caller)).catch(mapError);
      return { session: toProtoSession(session, { now: now() }) };
    },
    async *watchSession(req, ctx) {
      const events = orchestrator.watch(req.sessionId, ctx.signal, viewerOf(ctx.caller));
      // The first event is the snapshot, whose task the rest are masked by.
      let served = servedView({});
      try {
        for (;;) {
          const next = await events.next().catch(mapError);
          if (next.done) return;
          if (next.value.kind === "snapshot") served = servedView(next.value.session.task);
          yield watchResponse(next.value, now, served);
        }
      } finally {
        // Ended early (the caller went away): the watch lets go of what it follows.
        await events.return(undefined);
      }
    },
    async listSessions(req, ctx) {
      const page = await orchestrator
        .list(fromProtoState(req.state), req.pageSize || 50, req.pageToken || undefined, viewerOf(ctx.caller))
        .catch(mapError);
      const at = now();
      return {
        sessions: page.sessions.map((s) => toProtoSession(s, { now: at, withTask: false })),
        nextPageToken: page.nextCursor ?? "",
      };
    },
    async cancelSession(req, ctx) {
      return {
        session: toProtoSession(
          await orchestrator.cancel(req.sessionId, req.reason, viewerOf(ctx.caller)).catch(mapError),
          { now: now() },
        ),
      };
    },
    async resolveApproval(req, ctx) {
      // Four eyes are two people's: a key of any other role that a JWKS binds with approvals:write answers none.
      if (ctx.caller.role !== "person")
        throw new ToolError(
          status.PERMISSION_DENIED,
          "APPROVER_NOT_A_PERSON",
          `an approval is answered by a person; ${ctx.caller.subject} signs with a ${ctx.caller.role} key`,
        );
      if (req.approver && req.approver !== ctx.caller.subject) {
        const why = `the approver is taken from your credentials (${ctx.caller.subject}); leave approver empty`;
        throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", why, {
          fieldViolations: [{ field: "approver", description: why }],
        });
      }
      const session = await orchestrator
        .resolveApproval({
          sessionId: req.sessionId,
          approvalId: req.approvalId,
          argumentsHash: req.argumentsHash,
          approve: req.approve,
          approver: viewerOf(ctx.caller),
          reason: req.reason,
        })
        .catch(mapError);
      return { session: toProtoSession(session, { now: now() }) };
    },
    async getTrace(req, ctx) {
      return { records: await orchestrator.trace(req.sessionId, viewerOf(ctx.caller)).catch(mapError) };
    },
    getOverview: (_req, ctx) => overview(sources, viewerOf(ctx.caller)).catch(mapError),
    listToolStats: () => toolPanel(sources).catch(mapError),
    getTimeSeries: async (_req, ctx) => sources.series?.response(viewerOf(ctx.caller).admin) ?? {},
    listApprovals: (_req, ctx) => approvalQueue(sources, viewerOf(ctx.caller)).catch(mapError),
    getSessionDetail: (req, ctx) => sessionDetail(sources, req.sessionId, viewerOf(ctx.caller)).catch(mapError),
    recordPatrolRun: (req, ctx) => recordPatrolRun(orchestrator.store, req, ctx, now()).catch(mapError),
    listPatrolRuns: (req, ctx) => listPatrolRuns(orchestrator.store, req, viewerOf(ctx.caller)).catch(mapError),
  };
}
