// A session record as the contract's Session message: what the API and the dashboard's views send.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  ApprovalSchema,
  type SessionSchema,
  SessionState as ProtoState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { PendingApproval } from "../guard/approvals.js";
import { DEFAULT_MAX_RETRIES } from "../guard/budget.js";
import { type ServedView, servedView } from "../guard/personal-data-served.js";
import { contextUsageOf, pendingOf, storedConfidence, storedOutcome } from "../session/data.js";
import { healthScore } from "../session/session-health.js";
import type { SessionState } from "../session/session-state.js";
import { sessionTraceId } from "../session/trace-id.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";

export function toProtoState(state: SessionState): ProtoState {
  return ProtoState[state];
}

export function fromProtoState(state: ProtoState): SessionState | undefined {
  return state === ProtoState.UNSPECIFIED ? undefined : (ProtoState[state] as SessionState);
}

/**
 * Wall-clock milliseconds `s` has used by `now`, or by its end if it has ended. `now` is on the store's clock
 * (storeClock), the one its start was written and its deadline is enforced on: a replica whose own clock runs ahead
 * would show a live session's budget more spent than it is.
 */
export function wallClockUsed(s: SessionRecord, now: number): number {
  return Math.max(0, (s.stopReason ? s.updatedAt : now) - s.usage.startedAt);
}

/**
 * The contract's Session of a record, its wall clock used by `now` (see wallClockUsed). Lists leave the task out
 * (`withTask: false`): a page of sessions stays small however large each task is; GetSession has it. What a caller
 * wrote and what the model wrote is served as the model is shown the session (servedView).
 */
export function toProtoSession(
  s: SessionRecord,
  options: { readonly now: number; readonly withTask?: boolean },
): MessageInitShape<typeof SessionSchema> {
  const approval = (s.pending as { approval?: PendingApproval; call?: { arguments: string } } | null)?.approval;
  const callArgs = (s.pending as { call?: { arguments: string } } | null)?.call?.arguments;
  const served = servedView(s.task);
  return {
    sessionId: s.id,
    state: toProtoState(s.state),
    version: BigInt(s.version),
    goal: served.text(s.goal),
    ...(options.withTask === false ? {} : { task: served.value(s.task) }),
    budget: {
      maxSteps: s.budget.maxSteps,
      maxToolCalls: s.budget.maxToolCalls,
      maxTokens: BigInt(s.budget.maxTokens),
      maxWallClockMs: s.budget.deadlineMs,
      maxCostMicros: BigInt(s.budget.maxCostMicros),
      maxRetries: s.budget.maxRetries ?? DEFAULT_MAX_RETRIES,
    },
    usage: {
      steps: s.usage.steps,
      toolCalls: s.usage.toolCalls,
      tokens: uint64(s.usage.tokens),
      costMicros: uint64(s.usage.costMicros),
      wallClockMs: Math.min(wallClockUsed(s, options.now), 2 ** 32 - 1),
      retries: s.usage.retries ?? 0,
      takeovers: s.usage.takeovers ?? 0,
    },
    ...contextUsageOf(s),
    scopes: [...s.scopes],
    policy: s.policy,
    stopReason: s.stopReason ?? "",
    answer: served.stored(s.answer ?? ""),
    createdAt: timestampFromMs(s.createdAt),
    updatedAt: timestampFromMs(s.updatedAt),
    traceId: sessionTraceId(s),
    healthScore: healthScore(s),
    createdBy: s.createdBy,
    ...parkedAndOutcome(s, served),
    ...(approval && s.state === "AWAITING_APPROVAL"
      ? {
          pendingApproval: create(ApprovalSchema, {
            approvalId: approval.approvalId,
            tool: approval.tool,
            argumentsHash: approval.argumentsHash,
            worldVersion: approval.worldVersion,
            reason: served.stored(approval.reason),
            expiresAt: timestampFromMs(approval.expiresAt),
            arguments: callArgs ? served.value(JSON.parse(callArgs) as JsonObject) : {},
          }),
        }
      : {}),
  };
}

function parkedAndOutcome(
  s: SessionRecord,
  served: ServedView,
): Pick<MessageInitShape<typeof SessionSchema>, "parked" | "outcome" | "confidence" | "uncertaintyReason"> {
  const park = s.state === "PARKED" ? pendingOf(s).park : undefined;
  const outcome = storedOutcome(s);
  const stated = storedConfidence(s);
  return {
    ...(park
      ? {
          parked: {
            tool: park.tool,
            reason: served.stored(park.reason),
            wakeAt: timestampFromMs(park.wakeAt),
            since: timestampFromMs(park.since),
            attempts: park.attempts,
          },
        }
      : {}),
    ...(outcome ? { outcome } : {}),
    ...(stated ? { confidence: stated.value, uncertaintyReason: served.stored(stated.reason) } : {}),
  };
}

/** A stored figure as a uint64 field takes it: a record no reader can serialise would break every list it is on. */
function uint64(n: number): bigint {
  return Number.isFinite(n) && n > 0 ? BigInt(Math.min(Math.floor(n), Number.MAX_SAFE_INTEGER)) : 0n;
}
