// Call execution: the pending call goes out through the tool's client and its answer is
// observed; a call a dead replica left in flight is re-issued only when that is safe; an
// irreversible call whose outcome is unknown is settled by re-sending the same idempotency key
// before the policy hears anything, or goes to a human.
import { setTimeout as sleep } from "node:timers/promises";
import { backoffDelayMs, Effect, status, type CallError } from "@loopguard/tool-sdk";
import { withRetries } from "../guard/budget.js";
import { confidenceFields, statedIn } from "../guard/confidence.js";
import { redactText } from "../guard/redact.js";
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import type { RegisteredTool } from "../tool-registry.js";
import { contextJson, contextOf, type Pending, type PendingCall, pendingJson, pendingOf } from "./data.js";
import { sendApproved } from "./approve.js";
import { APPROVED, type Kit, runOf } from "./kit.js";
import { outcomeToHuman, waitForTool } from "./park.js";
import { passes } from "./park-rules.js";
import { safeToReissue } from "./plan.js";
import { type InFlight, observeSent, type Sent, send } from "./send.js";

/** Re-sends with the same key before an unknown outcome goes to a human, and the wait before the first (then 2×, 3×). */
const OUTCOME_RESOLUTION_ROUNDS = 3;
const OUTCOME_RESOLUTION_BACKOFF = { baseMs: 500, maxMs: 10_000, jitter: "none" } as const;

function describe(error: CallError): string {
  return `${status[error.code] ?? error.code}${error.reason ? ` ${error.reason}` : ""}`;
}

/**
 * A call whose run died with it (another run started it, and no human approved it since): sent
 * again when that is safe — an interrupted side effect's re-send settles it, it does not start
 * it — and otherwise left to a human.
 */
async function reissue(
  kit: Kit,
  s: SessionRecord,
  tool: RegisteredTool,
  call: PendingCall,
  pending: Pending,
): Promise<SessionRecord> {
  const { moves } = kit;
  const audit = { tool: tool.name, argsHash: call.argsHash };
  if (!safeToReissue(tool, call)) {
    const why = "an interrupted call of a non-idempotent tool may or may not have taken effect";
    return outcomeToHuman(kit, s, tool, call, pending, why, {
      reason: "interrupted non-idempotent call needs a human",
    });
  }
  let state = s;
  if (state.state === "RETRYING")
    state = await moves.move(state, "TOOL_EXECUTING", {
      audit: { reason: "re-issuing an interrupted call", ...audit },
    });
  const unsettled = tool.effect === Effect.IRREVERSIBLE_EXTERNAL ? { unsettled: true } : {};
  // The call goes out again: one more attempt, spending the session's retry budget like any other.
  return moves.move(state, state.state === "TOOL_EXECUTING" ? "RETRYING" : "TOOL_EXECUTING", {
    audit: { reason: "re-issuing an interrupted call (safe: read-only or same idempotency key)", ...audit },
    patch: {
      pending: pendingJson({ ...pending, startedBy: runOf(kit, s.id), ...unsettled }),
      usage: withRetries(state.usage, 1),
    },
  });
}

/**
 * Makes the pending call and observes its answer. `recorded`, when given, is the commit of this
 * TOOL_EXECUTING record still in flight (`s` is what it will be); it settles before any write.
 */
export async function execute(
  kit: Kit,
  s: SessionRecord,
  signal: AbortSignal,
  recorded?: Promise<SessionRecord>,
): Promise<SessionRecord> {
  const { deps, moves } = kit;
  const pending = pendingOf(s);
  const call = pending.call;
  if (!call) return moves.stop(s, "unrecoverable_error", "a tool call was in flight but its record is missing");
  const tool = deps.registry.get(call.tool)!;
  const audit = { tool: tool.name, argsHash: call.argsHash };
  // A human approved this call: this run records itself as its sender before it goes out, so a run
  // that finds it after a crash re-issues it as interrupted (its outcome unsettled), never as new.
  if (pending.startedBy === APPROVED) return sendApproved(kit, s);
  if (pending.startedBy !== runOf(kit, s.id)) return reissue(kit, s, tool, call, pending);
  if (s.state === "RETRYING") return moves.move(s, "TOOL_EXECUTING", { audit: { reason: "retrying", ...audit } });
  let state = s;
  let unsettled = recorded;
  const settle = async () => {
    if (unsettled) state = await unsettled;
    unsettled = undefined;
  };
  const client = deps.clients.get(tool.tool);
  if (!client) {
    await settle();
    return moves.stop(state, "unrecoverable_error", `no client for tool ${tool.tool}`);
  }
  const onRetry = async () => {
    await settle();
    state = await moves.move(state, "RETRYING", { audit: { reason: "retryable failure", ...audit } });
    state = await moves.move(state, "TOOL_EXECUTING", { audit: { reason: "retrying", ...audit } });
  };
  const flight: InFlight = { tool, client, call, pending };
  const sent = await send(kit, state, flight, signal, onRetry);
  await settle();
  if ("error" in sent && boundExceeded(flight, sent.error)) return decideAgain(kit, state, flight, sent.error);
  // The tool's own transient refusal (LEDGER_UNAVAILABLE) leaves it open too: it may come after the effect committed.
  if (
    "error" in sent &&
    tool.effect === Effect.IRREVERSIBLE_EXTERNAL &&
    !settles(sent.error) &&
    (sent.error.outcomeUnknown || pending.unsettled || sent.error.refusedByTool)
  ) {
    return resolveUnknown(kit, state, flight, sent.error, signal);
  }
  // The run was aborted (a stop, a lost lease) and the call cut off by it: that is no answer of the
  // tool's. The session stays TOOL_EXECUTING, and whoever runs it next sends the call again and pays
  // for it then; a session that ended (a cancel) pays now for a call that went out. (An irreversible
  // call is never cut off: its answer, whenever it comes, is recorded above or below.)
  if ("error" in sent && signal.aborted && tool.effect !== Effect.IRREVERSIBLE_EXTERNAL) {
    if (sent.error.attempts > 0) await moves.chargeIfEnded(state, { tokens: 0, costMicros: tool.costMicros });
    return state;
  }
  if ("error" in sent && passes(sent.error)) return waitForTool(kit, state, flight, sent.error);
  return observeSent(kit, state, flight, sent);
}

/**
 * Whether the tool's answer settles an irreversible call: a refusal from its contract's closed set
 * that does not pass. One that passes (billing's LEDGER_UNAVAILABLE: its database did not answer)
 * says nothing of whether an earlier attempt, or this one, committed.
 */
export function settles(error: CallError): boolean {
  return error.refusedByTool && !passes(error);
}

/** The tool refused the bound the host put in a money call: the entity moved more since the host decided, and nothing was done. */
function boundExceeded({ call }: InFlight, error: CallError): boolean {
  return (
    call.reservation !== undefined && error.code === status.FAILED_PRECONDITION && error.reason === "BOUND_EXCEEDED"
  );
}

/**
 * After BOUND_EXCEEDED the host decides again, as if the policy had just asked: what was held is
 * let go, and the policy's request goes back to the front of the queue (its record in the history
 * with it), to be planned from a new live read — which now usually asks a human, showing the new totals.
 */
function decideAgain(
  kit: Kit,
  s: SessionRecord,
  { tool, call, pending }: InFlight,
  error: CallError,
): Promise<SessionRecord> {
  const request = JSON.parse(call.arguments) as JsonObject;
  for (const field of tool.hostFields) delete request[field];
  const ctx = contextOf(s);
  const at = ctx.history.findLastIndex((h) => h.kind === "call" && h.callId === call.id);
  const history = at < 0 ? ctx.history : [...ctx.history.slice(0, at), ...ctx.history.slice(at + 1)];
  const audit = { tool: tool.name, argsHash: call.argsHash };
  return kit.moves.move(s, "THINKING", {
    via: [
      {
        state: "OBSERVING",
        audit: {
          reason: `${tool.name} refused the host's bound: ${redactText(error.message)}`,
          ...audit,
          outcome: "BOUND_EXCEEDED",
        },
      },
    ],
    audit: { reason: `${tool.name}: deciding again from a new live read`, ...audit },
    patch: {
      context: contextJson({ ...ctx, history }),
      pending: pendingJson({
        queue: [
          { id: call.id, name: tool.name, arguments: JSON.stringify(request), ...confidenceFields(statedIn(call)) },
          ...pending.queue,
        ],
      }),
    },
    money: { settle: call.effect!.key, outcome: "released" },
  });
}

/**
 * The call was sent but its outcome is unknown (a deadline, a dropped connection …): the host
 * finds out before the policy hears anything, by sending the same request with the same
 * idempotency key again — the tool replays it if it happened, makes it once if not. Until a
 * definite answer comes, nothing is reported as failed; if none comes, a human decides, and
 * approving re-sends it the same way. Shutdown or a lost lease leaves the session
 * TOOL_EXECUTING, and whoever takes it over re-sends with the same key.
 */
async function resolveUnknown(
  kit: Kit,
  s: SessionRecord,
  before: InFlight,
  first: CallError,
  signal: AbortSignal,
): Promise<SessionRecord> {
  const { moves } = kit;
  const { tool, call } = before;
  const flight: InFlight = { ...before, pending: { ...before.pending, unsettled: true } };
  const audit = { tool: tool.name, argsHash: call.argsHash };
  let state = s;
  let last = first;
  for (let round = 1; round <= OUTCOME_RESOLUTION_ROUNDS; round += 1) {
    if (signal.aborted) return state;
    const why = `outcome of ${tool.name} unknown (${describe(last)}); re-sending it with the same idempotency key`;
    // Each re-send is one more attempt, counted in the retry budget (never cut by it).
    state = await moves.move(state, "RETRYING", {
      audit: { reason: why, ...audit, outcome: "outcome_unknown" },
      patch: { pending: pendingJson(flight.pending), usage: withRetries(state.usage, 1) },
    });
    // The tool's (or the breaker's) RetryInfo when it gives one, bounded; else a growing backoff.
    const waitMs = Math.min(
      Math.max(backoffDelayMs(OUTCOME_RESOLUTION_BACKOFF, round), last.retryAfterMs ?? 0),
      OUTCOME_RESOLUTION_BACKOFF.maxMs,
    );
    await sleep(waitMs, undefined, { signal }).catch(() => undefined);
    if (signal.aborted) return state;
    state = await moves.move(state, "TOOL_EXECUTING", {
      audit: { reason: `re-sending ${tool.name} (round ${round})`, ...audit },
    });
    const sent: Sent = await send(kit, state, flight, signal);
    // Settled only by the tool's own answer to the same key: done (made now, or replayed), or
    // refused by the tool (then no earlier attempt made it either). A refusal before any handler
    // ran (an open breaker, a shed, a drain), or the tool's own transient one, says nothing about the earlier attempt.
    if ("error" in sent && boundExceeded(flight, sent.error)) return decideAgain(kit, state, flight, sent.error);
    if (!("error" in sent) || settles(sent.error)) return observeSent(kit, state, flight, sent);
    last = sent.error;
  }
  // The tool is down, not answering wrongly: the session waits for it, the outcome still unsettled.
  if (passes(last)) return waitForTool(kit, state, flight, last);
  const why = `the outcome of ${tool.name} is unknown after ${OUTCOME_RESOLUTION_ROUNDS} re-sends (last: ${describe(last)}); approving re-sends it with the same idempotency key, which makes it at most once`;
  return outcomeToHuman(kit, state, tool, call, flight.pending, why, {
    reason: "outcome unknown: a human decides",
    outcome: "outcome_unknown",
  });
}
