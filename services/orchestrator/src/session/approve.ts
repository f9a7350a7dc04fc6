// A human approved the action a session waits on: the call goes out next (sent by whichever
// replica drives the session), unless the world changed since the approval was asked or the
// session's wall clock can no longer cover it when a run comes to send it.
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import { readLive, refuseReads } from "../guard/live-reads.js";
import { worldVersionOf } from "../guard/side-effect-guard.js";
import { ReservationRefusedError } from "../store/effect-reservations.js";
import { deadlineOf, withRetries } from "../guard/budget.js";
import type { StopReason } from "./session-state.js";
import {
  alreadyDone,
  contextJson,
  contextOf,
  type Pending,
  pendingJson,
  pendingOf,
  queueLeft,
  reservationOf,
} from "./data.js";
import { APPROVED, guardDepsOf, holdReleased, type Kit, runOf } from "./kit.js";
import { errorEnvelope } from "../policies/envelope.js";
import { park } from "./park.js";

/**
 * Records the approval, one version-checked move: of answers given at once, one wins and the others
 * change nothing and read nothing. The world is read again by the run that sends the call
 * (sendApproved), fenced by its lease: a read made here, before the move, would be made (and paid
 * for) by every answer racing it. Not fenced: a waiting session is leased to nobody.
 */
export async function approve(kit: Kit, s: SessionRecord, approver: string, why: string): Promise<SessionRecord> {
  const { moves } = kit;
  const pending = pendingOf(s);
  const call = pending.call!;
  const approval = pending.approval!;
  const audit = { tool: approval.tool, argsHash: approval.argumentsHash };
  if (approval.kind !== "outcome_unknown") {
    const noRoom = noRoomToReadAgain(kit, s, pending, `approved by ${why}`, false);
    if (noRoom) return noRoom;
  }
  // The amount is held now, against the figures the approver was shown: if other sessions moved
  // the totals past them meanwhile, this approval no longer covers the call.
  const money = approval.kind === "outcome_unknown" ? undefined : reservationOf(s, call);
  try {
    return await moves.move(s, "TOOL_EXECUTING", {
      audit: { reason: `approved by ${why}`, ...audit, outcome: "approved" },
      patch: {
        // A re-send to settle an unknown outcome is a retry of the call counted before, as the host's own are (execute.ts).
        usage:
          approval.kind === "outcome_unknown"
            ? withRetries(s.usage, 1)
            : { ...s.usage, toolCalls: s.usage.toolCalls + 1 },
        pending: pendingJson({
          ...pending,
          approval: null,
          approvedBy: approver,
          startedBy: APPROVED,
        }),
      },
      fenced: false,
      ...(money ? { money } : {}),
    });
  } catch (error) {
    if (!(error instanceof ReservationRefusedError)) throw error;
    const totals = Object.entries(error.totals)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    return lookAgain(
      kit,
      s,
      { reason: `approved by ${why}, but the totals moved past what was approved`, ...audit },
      `other sessions moved the totals past what was approved (now, with this call: ${totals}); ask for a new approval`,
    );
  }
}

/**
 * The approved call, as the run that has a slot for it is about to send it: maybe long after the
 * approval, when every slot was busy. A new effect goes out only while the session's wall clock
 * still covers its whole SLA timeout (else the session stops `deadline`) and on the world that was
 * approved (read again now: else the policy hears EAPPROVAL; a session whose budgets cannot hold
 * that read stops before it); a call not sent lets its hold go, as a cancel does. A re-send of an
 * effect whose outcome is unknown is neither: its key makes no second effect, it settles the first
 * (its approval is asked once the wall clock ran out), and its own attempt may be what moved the
 * world. Then this run records itself as the call's sender.
 */
export async function sendApproved(kit: Kit, s: SessionRecord): Promise<SessionRecord> {
  const { deps, moves } = kit;
  const pending = pendingOf(s);
  const call = pending.call!;
  const tool = deps.registry.get(call.tool)!;
  const audit = { tool: tool.name, argsHash: call.argsHash };
  const why = `approved by ${pending.approvedBy ?? "a person"}`;
  if (!pending.unsettled) {
    const left = deadlineOf(s.usage, s.budget) - deps.now();
    if (left < tool.timeoutMs)
      return stopUnsent(
        kit,
        s,
        pending,
        true,
        "deadline",
        `the approved ${tool.name} call was not made: ${Math.max(0, left)} ms of the session's wall clock left when a run could send it, less than its ${tool.timeoutMs} ms SLA timeout`,
      );
    const moved = await unlessWorldMoved(kit, s, pending, why, audit);
    if (moved) return moved;
  }
  return moves.move(s, "TOOL_EXECUTING", {
    audit: { reason: "sending the approved call", ...audit },
    patch: { pending: pendingJson({ ...pending, startedBy: runOf(kit, s.id) }) },
  });
}

/**
 * The entity the approved call acts on, read again by the run about to send it (its moves fenced by
 * its lease): undefined when it is as approved; else the session, moved: parked with its approval
 * and hold kept when the read failed for a reason that passes (the reader down, its breaker open)
 * and the wall clock covers a wait; otherwise back to the policy with EAPPROVAL, or stopped when its
 * budgets cannot hold the read, the hold the approval took let go.
 */
async function unlessWorldMoved(
  kit: Kit,
  s: SessionRecord,
  pending: Pending,
  why: string,
  audit: { readonly tool: string; readonly argsHash: string },
): Promise<SessionRecord | undefined> {
  const { deps } = kit;
  const call = pending.call!;
  const tool = deps.registry.get(call.tool)!;
  const guard = deps.rules.effectOf(tool);
  if (!call.worldVersion || !guard?.reader) return undefined;
  const noRoom = noRoomToReadAgain(kit, s, pending, why, true);
  if (noRoom) return noRoom;
  const entityId = String((JSON.parse(call.arguments) as JsonObject)[guard.idField] ?? "");
  const live = await kit.spans.span(s, `approved ${tool.name}: read again`, { "gen_ai.tool.name": tool.name }, () =>
    readLive(guardDepsOf(kit), s, guard.reader!, entityId),
  );
  if (!live.ok && live.passing) {
    // The reader is down for a while, not the world changed: the approval is kept, and so is its hold.
    const parked = park(kit, s, pending, live.passing);
    if (parked) return parked;
  }
  const current = live.ok ? worldVersionOf(guard, entityId, live.data) : undefined;
  if (current === call.worldVersion) return undefined;
  const message = live.ok
    ? `the world changed since the approval was asked (${call.worldVersion} → ${current}); look again and ask for a new approval`
    : `the world could not be read again before acting on the approval (${live.why}); ask for a new approval`;
  return lookAgain(kit, s, { reason: `${why}, but the approval no longer matches the world`, ...audit }, message, true);
}

/**
 * The session stopped, when its budgets cannot hold the read again of the entity and the call (its
 * hold let go); else undefined. `sending`: checked by the run about to send it (fenced by its lease;
 * the call was counted when the approval was recorded); else as the approval is answered.
 */
function noRoomToReadAgain(
  kit: Kit,
  s: SessionRecord,
  pending: Pending,
  why: string,
  sending: boolean,
): Promise<SessionRecord> | undefined {
  const call = pending.call!;
  const guard = kit.deps.rules.effectOf(kit.deps.registry.get(call.tool)!);
  if (!call.worldVersion || !guard?.reader) return undefined;
  const noRoom = refuseReads(s, guard, kit.deps.now(), [guard.reader], sending);
  return noRoom && stopUnsent(kit, s, pending, sending, noRoom.reason, `${noRoom.answer} (${why})`);
}

/** The approved call is not sent: the session stops, saying what it did, and the call's hold is let go, as a cancel lets it go; `fenced` by the run's lease when a run stops it. */
function stopUnsent(
  kit: Kit,
  s: SessionRecord,
  pending: Pending,
  fenced: boolean,
  reason: StopReason,
  answer: string,
): Promise<SessionRecord> {
  const money = holdReleased(pending);
  return kit.moves.stop(s, reason, `${answer}${alreadyDone(s, kit.deps.registry)}`, {
    fenced,
    ...(money ? { money } : {}),
  });
}

/**
 * The approval no longer covers the call: the policy hears EAPPROVAL, and plans again. `sending`:
 * found by the run about to send it, which lets go of the hold the approval took.
 */
function lookAgain(
  kit: Kit,
  s: SessionRecord,
  audit: { readonly reason: string; readonly tool: string; readonly argsHash: string },
  message: string,
  sending = false,
): Promise<SessionRecord> {
  const pending = pendingOf(s);
  const call = pending.call!;
  const envelope = errorEnvelope(
    { code: "EAPPROVAL", message, suggestedAction: "look the entity up again" },
    kit.deps.now(),
  );
  const ctx = contextOf(s);
  const history = [...ctx.history, { kind: "observation" as const, callId: call.id, tool: call.tool, envelope }];
  const patch = { context: contextJson({ ...ctx, history }), pending: queueLeft(pending.queue) };
  if (!sending)
    return kit.moves.move(s, "THINKING", { audit: { ...audit, outcome: "EAPPROVAL" }, patch, fenced: false });
  // From TOOL_EXECUTING, through OBSERVING: the run observes that its call is not to be sent.
  const money = holdReleased(pending);
  return kit.moves.move(s, "THINKING", {
    via: [{ state: "OBSERVING", audit: { ...audit, outcome: "EAPPROVAL" } }],
    audit: { reason: `the approved ${call.tool} call was not sent; the policy plans again`, tool: audit.tool },
    patch,
    ...(money ? { money } : {}),
  });
}
