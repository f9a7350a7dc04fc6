// Riding out a tool's bad minutes: a call the session needs that failed for a reason that passes
// (the tool down, its breaker open, overloaded, too slow) parks the session — PARKED, durable,
// holding no lease, its call kept — until a wake time with backoff and jitter, or until the tool
// recovers (Orchestrator's wake loop). It goes on from where it was as long as its wall clock
// covers the wait and the call's SLA timeout; when it no longer does, a degraded answer stands in
// if the method declares one, and otherwise the session ends tool_unavailable, saying so.
import { Effect, type CallError } from "@loopguard/tool-sdk";
import { newApproval } from "../guard/approvals.js";
import { DEFAULT_MAX_RETRIES, deadlineOf, retriesLeft, withRetries, withSpend } from "../guard/budget.js";
import type { ToolSpec } from "../policies/policy.js";
import type { SessionRecord, Spend, Usage } from "../store/session-store.js";
import type { RegisteredTool } from "../tool-registry.js";
import { type Park, type Pending, type PendingCall, pendingJson, pendingOf } from "./data.js";
import { APPROVED, type Kit, runOf } from "./kit.js";
import { failureName, type WaitFor, wakeTime } from "./park-rules.js";
import { type InFlight, observeSent } from "./send.js";

/**
 * Parks `s` (TOOL_EXECUTING, RETRYING or THINKING) until the tool is tried again, keeping its
 * pending work; undefined when its wall clock does not cover the wait plus the call's timeout, or
 * when the call it would send again on waking has no retry left in the session's budget (a re-send
 * to settle an irreversible call's unknown outcome is counted, never cut). An approved call not
 * sent yet keeps its approval: on waking it is read again and sent, not retried.
 */
export function park(kit: Kit, s: SessionRecord, pending: Pending, wait: WaitFor): Promise<SessionRecord> | undefined {
  const { tool, reason, retryAfterMs, attempts: spent = 1 } = wait;
  const now = kit.deps.now();
  const before = pending.park?.tool === tool.tool ? pending.park : undefined;
  const attempts = before?.attempts ?? 0;
  const wakeAt = wakeTime(now, attempts, retryAfterMs);
  if (wakeAt + tool.timeoutMs > deadlineOf(s.usage, s.budget)) return undefined;
  const usage = withRetries(s.usage, Math.max(0, spent - 1));
  const settling = pending.unsettled === true && tool.effect === Effect.IRREVERSIBLE_EXTERNAL;
  const approved = pending.startedBy === APPROVED;
  if (pending.call && !settling && !approved && retriesLeft(usage, s.budget) === 0) return undefined;
  const paid = failedCallSpend(s, wait);
  const next: Park = {
    tool: tool.tool,
    reason,
    wakeAt,
    parkedAt: now,
    since: before?.since ?? now,
    attempts: attempts + 1,
  };
  return kit.moves.move(s, "PARKED", {
    audit: {
      reason: `${tool.name}: ${reason}; parked until ${new Date(wakeAt).toISOString()} (try ${attempts + 1})`,
      tool: tool.name,
      outcome: "parked",
    },
    patch: {
      pending: pendingJson({ ...pending, startedBy: approved ? APPROVED : "", park: next }),
      ...(paid ? { usage: paid.usage } : {}),
    },
    ...(paid ? { spend: paid.spend, spendReissued: true } : {}),
  });
}

/**
 * What a call that went out and failed spent (waitForTool's: a live read charges its own): its
 * attempts past the first, and its price, as an observed failure pays it (observe.ts).
 */
function failedCallSpend(
  s: SessionRecord,
  { tool, attempts = 0 }: WaitFor,
): { usage: Usage; spend: Spend } | undefined {
  if (attempts === 0) return undefined;
  const spend = { tokens: 0, costMicros: tool.costMicros };
  return { usage: withSpend(withRetries(s.usage, attempts - 1), spend), spend };
}

/** The tools the session may call, each whose method's breaker is open marked with when it is tried again (no call goes out before). */
export function toolsNow({ deps }: Kit, s: SessionRecord): ToolSpec[] {
  const now = deps.now();
  return deps.registry.specs(s.scopes).map((spec) => {
    const tool = deps.registry.get(spec.name);
    const retryAt = tool ? deps.clients.get(tool.tool)?.retryAtOf(tool.method.localName) : undefined;
    return retryAt !== undefined && retryAt > now
      ? { ...spec, unavailableUntil: new Date(retryAt).toISOString() }
      : spec;
  });
}

/** A woken session goes on: its call goes out again, or (parked while planning) the host plans it again. */
export function wake(kit: Kit, s: SessionRecord): Promise<SessionRecord> {
  const { deps, moves } = kit;
  const pending = pendingOf(s);
  const parked = pending.park;
  const call = pending.call;
  const tool = call ? deps.registry.get(call.tool) : undefined;
  // A read is tried once more whatever is left (it may answer now; if not, its degraded answer
  // stands in); an irreversible call is not started without its whole SLA timeout.
  if (
    call &&
    tool?.effect === Effect.IRREVERSIBLE_EXTERNAL &&
    deadlineOf(s.usage, s.budget) < deps.now() + tool.timeoutMs
  ) {
    return giveUp(kit, s, { tool, reason: parked?.reason ?? "unavailable" }, pending);
  }
  const tries = `woken (parked ${parked?.attempts ?? 0} time(s) since ${new Date(parked?.since ?? deps.now()).toISOString()})`;
  if (call && pending.startedBy === APPROVED) {
    // Not a retry: the approved call was never sent; the run reads its entity again first (sendApproved).
    return moves.move(s, "TOOL_EXECUTING", {
      audit: {
        reason: `${tries}: reading again before sending the approved ${call.tool} call`,
        tool: call.tool,
        argsHash: call.argsHash,
      },
    });
  }
  if (call) {
    // The call goes out again: one more attempt, spending the session's retry budget like any other.
    return moves.move(s, "TOOL_EXECUTING", {
      audit: { reason: `${tries}: sending ${call.tool} again`, tool: call.tool, argsHash: call.argsHash },
      patch: { pending: pendingJson({ ...pending, startedBy: runOf(kit, s.id) }), usage: withRetries(s.usage, 1) },
    });
  }
  return moves.move(s, "THINKING", { audit: { reason: `${tries}: planning the call again` } });
}

/**
 * The failure of a call in flight passes: park, or when the wall clock is too short for another
 * try, answer with the method's degraded answer or end tool_unavailable.
 */
export function waitForTool(kit: Kit, s: SessionRecord, flight: InFlight, error: CallError): Promise<SessionRecord> {
  const wait = {
    tool: flight.tool,
    reason: failureName(error),
    retryAfterMs: error.retryAfterMs,
    attempts: error.attempts,
  };
  const parked = park(kit, s, flight.pending, wait);
  if (parked) return parked;
  const degraded = flight.client.degradedResponse(flight.tool.method.localName as never);
  if (degraded !== undefined) {
    return observeSent(kit, s, flight, {
      result: {
        response: degraded as never,
        source: "degraded",
        attempts: error.attempts,
        latencyMs: 0,
        liveError: error,
      },
    });
  }
  return giveUp(kit, s, wait, flight.pending);
}

/**
 * A call whose outcome the host cannot settle waits for a human (approval kind outcome_unknown);
 * approving re-sends it with the same idempotency key, so whoever sends it makes it at most once.
 */
export function outcomeToHuman(
  { deps, moves }: Kit,
  s: SessionRecord,
  tool: RegisteredTool,
  call: PendingCall,
  pending: Pending,
  why: string,
  audit: { readonly reason: string; readonly outcome?: string },
): Promise<SessionRecord> {
  const approval = newApproval(
    tool.name,
    call.argsHash,
    call.worldVersion,
    why,
    deps.now(),
    deps.approvals,
    "outcome_unknown",
  );
  return moves.move(s, "AWAITING_APPROVAL", {
    audit: { ...audit, tool: tool.name, argsHash: call.argsHash },
    patch: { pending: pendingJson({ ...pending, approval, startedBy: "" }) },
  });
}

/**
 * The session's wall clock cannot cover another try: it ends tool_unavailable and says so. A
 * money call's hold is let go — the tool's refusals say nothing was done — except when an earlier
 * attempt's outcome is unknown: then a human decides, and approving re-sends it with the same key.
 */
export function giveUp(kit: Kit, s: SessionRecord, wait: WaitFor, pending: Pending): Promise<SessionRecord> {
  const { moves, deps } = kit;
  const { tool, reason } = wait;
  const call = pending.call;
  const since = pending.park?.since;
  const tries = pending.park?.attempts ?? 0;
  if (call && pending.unsettled && tool.effect === Effect.IRREVERSIBLE_EXTERNAL) {
    const why = `${tool.name} stayed unavailable (${reason}) and the outcome of an earlier attempt is unknown; approving re-sends it with the same idempotency key, which makes it at most once`;
    return outcomeToHuman(kit, s, tool, call, pending, why, {
      reason: "outcome unknown: a human decides",
      outcome: "outcome_unknown",
    });
  }
  const waited =
    since === undefined ? "" : ` since ${new Date(since).toISOString()} (${tries} tr${tries === 1 ? "y" : "ies"})`;
  const notMade = call?.tool ?? pending.queue[0]?.name ?? tool.name;
  const paid = failedCallSpend(s, wait);
  const usage = paid?.usage ?? s.usage;
  // What ended the wait: the wall clock, unless it had room for another try and the retries ran out.
  const outOfTime = deps.now() + tool.timeoutMs > deadlineOf(s.usage, s.budget);
  const until =
    call && !outOfTime && retriesLeft(usage, s.budget) === 0
      ? `until the session's retry budget was spent (${usage.retries ?? 0} of ${s.budget.maxRetries ?? DEFAULT_MAX_RETRIES} retries)`
      : "for as long as the session's wall clock allowed";
  const answer = `${tool.tool} was unavailable (${reason})${waited} ${until}; nothing was done: ${notMade} was not made.`;
  return moves.stop(s, "tool_unavailable", answer, {
    ...(call?.effect ? { money: { settle: call.effect.key, outcome: "released" } } : {}),
    ...(paid ? { patch: { usage: paid.usage }, spend: paid.spend } : {}),
  });
}
