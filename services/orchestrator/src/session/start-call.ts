// Starting a planned call: TOOL_EXECUTING recorded with the call (and any money it reserves),
// then the call itself, sent early when it is read-only.
import { Effect } from "@loopguard/tool-sdk";
import type { SessionRecord, Spend, StepRecord, Usage } from "../store/session-store.js";
import type { RegisteredTool } from "../tool-registry.js";
import {
  contextJson,
  type Pending,
  type PendingCall,
  pendingJson,
  reservationOf,
  type SessionContext,
} from "./data.js";
import { execute } from "./execute.js";
import { type Kit, runOf } from "./kit.js";
import { startOf } from "./moves.js";

/** A call about to start: what it records with it. */
export interface Start {
  readonly tool: RegisteredTool;
  readonly call: PendingCall;
  readonly rest: Pending["queue"];
  readonly context: SessionContext;
  readonly step?: StepRecord;
  readonly reason?: string;
  /** The model call that decided it, charged to the session should it have ended meanwhile (see MoveOptions). */
  readonly spend?: Spend;
  /** The session's usage with the decision that planned the call (its step, its model call), when it is made with it. */
  readonly usage?: Usage;
}

/**
 * Records TOOL_EXECUTING, then makes the call. A read-only call goes out while that record is
 * being committed instead of after: re-issuing it is always safe, so a crash before the commit
 * (the session resumes THINKING and decides again) loses nothing, and a step waits for one
 * commit less. Every other call waits for its record, so an interrupted one is known. `s` is the
 * record as stored: what the move adds to its usage is written on top of the stored usage.
 */
export function startCall(
  kit: Kit,
  s: SessionRecord,
  { tool, call, rest, context, step, reason = `calling ${tool.name}`, spend, usage = s.usage }: Start,
  signal: AbortSignal,
): Promise<SessionRecord> {
  const { moves } = kit;
  const patch = {
    context: contextJson(context),
    usage: { ...usage, toolCalls: usage.toolCalls + 1 },
    pending: pendingJson({ queue: rest, call, startedBy: runOf(kit, s.id) }),
  };
  const money = reservationOf(s, call);
  const recorded = moves.move(s, "TOOL_EXECUTING", {
    audit: { reason, tool: tool.name, argsHash: call.argsHash, expectedTimeoutMs: tool.timeoutMs },
    patch,
    ...(step ? { step } : {}),
    ...(money ? { money } : {}),
    ...(spend ? { spend } : {}),
  });
  if (tool.effect !== Effect.READ_ONLY) return recorded;
  // Awaited by execute before its first write; this only keeps a failure from going unhandled
  // if the call itself throws first.
  recorded.catch(() => undefined);
  // One version per state the move passes, as SessionMoves.move records it.
  return execute(
    kit,
    { ...s, ...patch, state: "TOOL_EXECUTING", version: s.version + 1 + startOf(s, "TOOL_EXECUTING").length },
    signal,
    recorded,
  );
}
