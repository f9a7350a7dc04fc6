// A human approved the action a session waits on: the call goes out next (sent by whichever
// replica drives the session), unless the world changed since the approval was asked.
import type { JsonObject, SessionRecord } from "../store/session-store.js";
import { readLive, refuseReads } from "../guard/live-reads.js";
import { worldVersionOf } from "../guard/side-effect-guard.js";
import { ReservationRefusedError } from "../store/effect-reservations.js";
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
import { APPROVED } from "./execute.js";
import { guardDepsOf, type Kit } from "./kit.js";
import { errorEnvelope } from "../policies/envelope.js";

/**
 * Unless the approval is to settle an unknown outcome (a re-send of the same effect), the world is
 * read again first: if the entity changed since the approval was asked, the approval no longer
 * covers it and the policy hears EAPPROVAL. A session whose budgets cannot hold that read and the
 * call stops before reading, as the first pass would have. Not fenced: a waiting session is leased
 * to nobody.
 */
export async function approve(kit: Kit, s: SessionRecord, approver: string, why: string): Promise<SessionRecord> {
  const { deps, moves } = kit;
  const pending = pendingOf(s);
  const call = pending.call!;
  const approval = pending.approval!;
  const tool = deps.registry.get(call.tool)!;
  const guard = deps.rules.effectOf(tool);
  const audit = { tool: approval.tool, argsHash: approval.argumentsHash };
  if (approval.kind !== "outcome_unknown" && call.worldVersion && guard?.reader) {
    const noRoom = refuseReads(s, guard, deps.now(), [guard.reader]);
    if (noRoom) return noRoomToRead(kit, s, pending, noRoom, why);
    const entityId = String((JSON.parse(call.arguments) as JsonObject)[guard.idField] ?? "");
    const live = await kit.spans.span(s, `approved ${tool.name}: read again`, { "gen_ai.tool.name": tool.name }, () =>
      readLive(guardDepsOf(kit), s, guard.reader!, entityId),
    );
    const current = live.ok ? worldVersionOf(guard, entityId, live.data) : undefined;
    if (current !== call.worldVersion) {
      const message = live.ok
        ? `the world changed since the approval was asked (${call.worldVersion} → ${current}); look again and ask for a new approval`
        : `the world could not be read again before acting on the approval (${live.why}); ask for a new approval`;
      return lookAgain(kit, s, `approved by ${why}, but the approval no longer matches the world`, message);
    }
  }
  // The amount is held now, against the figures the approver was shown: if other sessions moved
  // the totals past them meanwhile, this approval no longer covers the call.
  const money = approval.kind === "outcome_unknown" ? undefined : reservationOf(s, call);
  try {
    return await moves.move(s, "TOOL_EXECUTING", {
      audit: { reason: `approved by ${why}`, ...audit, outcome: "approved" },
      patch: {
        usage: { ...s.usage, toolCalls: s.usage.toolCalls + 1 },
        pending: pendingJson({ ...pending, approval: null, approvedBy: approver, startedBy: APPROVED }),
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
      `approved by ${why}, but the totals moved past what was approved`,
      `other sessions moved the totals past what was approved (now, with this call: ${totals}); ask for a new approval`,
    );
  }
}

/**
 * The session's budgets cannot hold the read again and the call: it stops, saying what it did, and
 * a hold the call has is let go (it was not made), as a cancel lets it go.
 */
function noRoomToRead(
  kit: Kit,
  s: SessionRecord,
  pending: Pending,
  { reason, answer }: NonNullable<ReturnType<typeof refuseReads>>,
  why: string,
): Promise<SessionRecord> {
  const effect = pending.call?.effect;
  const hold = effect && !pending.unsettled ? { money: { settle: effect.key, outcome: "released" as const } } : {};
  return kit.moves.stop(s, reason, `${answer} (approved by ${why})${alreadyDone(s, kit.deps.registry)}`, {
    fenced: false,
    ...hold,
  });
}

/** The approval no longer covers the call: the policy hears EAPPROVAL, and plans again. */
function lookAgain(kit: Kit, s: SessionRecord, auditReason: string, message: string): Promise<SessionRecord> {
  const pending = pendingOf(s);
  const call = pending.call!;
  const approval = pending.approval!;
  const envelope = errorEnvelope(
    { code: "EAPPROVAL", message, suggestedAction: "look the entity up again" },
    kit.deps.now(),
  );
  const ctx = contextOf(s);
  const history = [...ctx.history, { kind: "observation" as const, callId: call.id, tool: call.tool, envelope }];
  return kit.moves.move(s, "THINKING", {
    audit: { reason: auditReason, tool: approval.tool, argsHash: approval.argumentsHash, outcome: "EAPPROVAL" },
    patch: { context: contextJson({ ...ctx, history }), pending: queueLeft(pending.queue) },
    fenced: false,
  });
}
