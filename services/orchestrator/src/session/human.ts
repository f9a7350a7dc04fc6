// What a human does to a session: cancel it, or answer the approval it waits on. Both move it
// through SessionMoves like every other move (counted, audited), unfenced: a waiting session is
// leased to nobody, and a running one may be another replica's.
import { Effect } from "@loopguard/tool-sdk";
import { OrchestratorError } from "../api/orchestrator-error.js";
import { accessTo, readable, type Viewer } from "../api/session-access.js";
import { redactText } from "../guard/redact.js";
import type { SessionFollower } from "../store/session-events.js";
import { isTerminal } from "./session-state.js";
import { type SessionRecord, type SessionStore, StaleTransitionError } from "../store/session-store.js";
import type { RegisteredTool, ToolRegistry } from "../tool-registry.js";
import { alreadyDone, contextJson, contextOf, pendingOf } from "./data.js";
import { APPROVED, holdReleased } from "./kit.js";
import { unsettledTool } from "./outcome.js";
import type { SessionMoves } from "./moves.js";

export interface HumanDeps {
  readonly registry: ToolRegistry;
  readonly moves: SessionMoves;
  readonly now: () => number;
  /** The session, or SESSION_NOT_FOUND. */
  get(id: string): Promise<SessionRecord>;
  /** Stops the session's runner, on this replica or (announced through the store) on whichever replica drives it. */
  abort(id: string): void;
}

export interface ApprovalAnswer {
  readonly sessionId: string;
  readonly approvalId: string;
  readonly argumentsHash: string;
  readonly approve: boolean;
  /** The person answering, as the session rules see them (the answer is theirs: their authenticated subject). */
  readonly approver: Viewer;
  readonly reason: string;
}

/** What an answer says of `tool`'s call whose earlier attempt's outcome is unknown. */
function effectUnknown(tool: string): string {
  return `whether its earlier attempt took effect is unknown: check ${tool}'s records`;
}

/**
 * The tool of a call a human approved that no run has sent yet (see APPROVED), maybe parked while
 * its entity could not be read again. Its sender records itself first with a version-checked move,
 * so either that move or a cancel lands, never both: a cancel that lands first stops the session
 * before anything is sent.
 */
function approvedUnsent(s: SessionRecord): string | undefined {
  const pending = pendingOf(s);
  const waiting = s.state === "TOOL_EXECUTING" || s.state === "PARKED";
  return waiting && pending.startedBy === APPROVED ? pending.call?.tool : undefined;
}

/** The irreversible tool a session is calling right now, if any (an approved call not sent yet is not in flight). */
function irreversibleInFlight(s: SessionRecord, registry: ToolRegistry): RegisteredTool | undefined {
  if (s.state !== "TOOL_EXECUTING" && s.state !== "RETRYING") return undefined;
  const call = pendingOf(s).call;
  const tool = call && !approvedUnsent(s) ? registry.get(call.tool) : undefined;
  return tool?.effect === Effect.IRREVERSIBLE_EXTERNAL ? tool : undefined;
}

/** What a cancel's answer says of a session's pending call: an approved one not made, an earlier attempt's unknown outcome. */
function pendingCallNote(s: SessionRecord): string {
  const approved = approvedUnsent(s);
  const unsettled = unsettledTool(s);
  const notMade = approved ? `; the approved ${approved} call was not ${unsettled ? "re-sent" : "made"}` : "";
  return `${notMade}${unsettled ? `; whether an earlier attempt of ${unsettled} took effect is unknown: check ${unsettled}'s records` : ""}`;
}

/**
 * Cancels a session. An irreversible call in flight is never cut off: the cancel waits (up to the
 * call's own timeout, woken by `changes`) for its outcome to be recorded, so the session ends
 * CANCELLED with what really happened; past that it is refused with CALL_IN_FLIGHT, to be retried.
 * An approved call that no run has sent yet is not in flight: the cancel stops it unsent.
 */
export async function cancelSession(
  d: HumanDeps,
  id: string,
  reason: string,
  by: string,
  changes: SessionFollower,
): Promise<SessionRecord> {
  const started = d.now();
  for (;;) {
    const s = await d.get(id);
    if (s.state === "CANCELLED") return s;
    if (isTerminal(s.state))
      throw new OrchestratorError(
        "SESSION_TERMINAL",
        `session ${id} already ended (${s.state}, ${s.stopReason ?? ""})`,
      );
    const inFlight = irreversibleInFlight(s, d.registry);
    if (inFlight) {
      // Stops the runner after the call is recorded (the call itself is not cut off), whichever
      // replica drives it, so the policy decides nothing more before the cancel lands.
      d.abort(id);
      const left = started + inFlight.timeoutMs + 1000 - d.now();
      if (left <= 0) {
        throw new OrchestratorError(
          "CALL_IN_FLIGHT",
          `session ${id} has an irreversible ${inFlight.name} call in flight whose outcome is still being resolved; cancel again shortly`,
        );
      }
      await changes.next(undefined, left);
      continue;
    }
    const answer = `cancelled by ${by}${reason ? `: ${reason}` : ""}${alreadyDone(s, d.registry, " before the cancel")}${pendingCallNote(s)}`;
    try {
      // A money call that certainly was not made (parked, or approved and not sent yet) lets its
      // hold go with the cancel; one whose earlier attempt's outcome is unknown keeps it.
      const money = s.state === "PARKED" || approvedUnsent(s) ? holdReleased(pendingOf(s)) : undefined;
      const stopped = await d.moves.stop(s, "cancelled", answer, { fenced: false, ...(money ? { money } : {}) });
      d.abort(id);
      return stopped;
    } catch (error) {
      if (!(error instanceof StaleTransitionError)) throw error;
    }
  }
}

/**
 * A human's answer to the approval a session waits on. It must name the approval and the
 * arguments hash that were shown (anything else is stale: nothing is approved), and come from
 * someone other than the session's creator (four eyes). A deny ends the session here; an approval
 * is checked and recorded by `approve`. A session the approver may not read (neither theirs nor
 * waiting) is SESSION_NOT_FOUND, as for an unknown id: the answer tells nothing of it.
 */
export async function answerApproval(
  d: HumanDeps,
  input: ApprovalAnswer,
  approve: (s: SessionRecord, approver: string, by: string) => Promise<SessionRecord>,
): Promise<SessionRecord> {
  const read = await d.get(input.sessionId);
  const late = expiredBeforeAnswer(read, input);
  if (late) throw late;
  const s = readable(input.approver, read);
  if (isTerminal(s.state))
    throw new OrchestratorError("SESSION_TERMINAL", `session ${s.id} already ended (${s.state})`);
  const approval = pendingOf(s).approval;
  if (
    s.state !== "AWAITING_APPROVAL" ||
    !approval ||
    approval.approvalId !== input.approvalId ||
    approval.argumentsHash !== input.argumentsHash
  ) {
    throw new OrchestratorError(
      "APPROVAL_MISMATCH",
      `session ${s.id} is not waiting on approval ${input.approvalId} with arguments ${input.argumentsHash}${approval && s.state === "AWAITING_APPROVAL" ? ` (it waits on ${approval.approvalId} with arguments ${approval.argumentsHash}; look again)` : ""}; nothing was approved`,
    );
  }
  const approver = input.approver.subject;
  if (approver === s.createdBy) {
    throw new OrchestratorError(
      "SELF_APPROVAL",
      `${approver} started session ${s.id} and cannot also ${input.approve ? "approve" : "deny"} its action; another person must`,
    );
  }
  if (approval.expiresAt <= d.now()) throw approvalExpired(approval);
  const by = redactText(`${approver}${input.reason ? `: ${input.reason}` : ""}`);
  const answer =
    approval.kind === "outcome_unknown"
      ? `${approval.tool} was not re-sent (denied by ${by}); ${effectUnknown(approval.tool)}`
      : `${approval.tool} was not approved (denied by ${by}); nothing was executed`;
  try {
    return await (input.approve
      ? approve(s, approver, by)
      : d.moves.stop(s, "approval_denied", answer, { fenced: false }));
  } catch (error) {
    // Another answer, a cancel or the expiry moved the session first: this answer changed nothing.
    if (!(error instanceof StaleTransitionError)) throw error;
    throw await overtaken(d, s.id, input);
  }
}

function approvalExpired(approval: { approvalId: string; expiresAt: number }): OrchestratorError {
  return new OrchestratorError(
    "APPROVAL_EXPIRED",
    `approval ${approval.approvalId} expired at ${new Date(approval.expiresAt).toISOString()}; nothing was approved`,
  );
}

/**
 * APPROVAL_EXPIRED when the expiry sweep ended `s` for the very approval `input` answers (its id and
 * arguments hash): told to its approver too, who may no longer read the session. An answer naming
 * anything else learns nothing from it.
 */
function expiredBeforeAnswer(s: SessionRecord, input: ApprovalAnswer): OrchestratorError | undefined {
  const expired = contextOf(s).expiredApproval;
  const named = expired?.approvalId === input.approvalId && expired.argumentsHash === input.argumentsHash;
  return named && isTerminal(s.state) ? approvalExpired(expired) : undefined;
}

/**
 * Why an answer that lost the race to another move of the session took no effect. An approver who
 * may no longer read the session (it stopped waiting) is told only that: not how it went on.
 */
async function overtaken(d: HumanDeps, id: string, input: ApprovalAnswer): Promise<OrchestratorError> {
  const now = await d.get(id);
  const late = expiredBeforeAnswer(now, input);
  if (late) return late;
  const nothing = input.approve ? "nothing was approved" : "this deny changed nothing";
  if (accessTo(input.approver, now) === "none")
    return new OrchestratorError(
      "APPROVAL_MISMATCH",
      `session ${id} stopped waiting on approval ${input.approvalId} before this answer landed (another answer, a cancel or its expiry came first); ${nothing}`,
    );
  return isTerminal(now.state)
    ? new OrchestratorError(
        "SESSION_TERMINAL",
        `session ${id} ended (${now.state}) before this answer landed; ${nothing}`,
      )
    : new OrchestratorError(
        "APPROVAL_MISMATCH",
        `session ${id} moved on (to ${now.state}) before this answer landed: another answer came first; ${nothing}`,
      );
}

/** Most expired approvals one sweep ends; the next sweep takes the rest. */
const SWEEP_BATCH = 100;
const SWEEP_PAGES = 10;

/**
 * Ends the sessions whose approval expired unanswered. Every replica sweeps; the optimistic lock
 * lets exactly one of them (or a human's answer racing it) move each session.
 */
export async function expireApprovals(d: HumanDeps, store: SessionStore): Promise<void> {
  for (let page = 0; page < SWEEP_PAGES; page += 1) {
    const expired = await store.expiredApprovals(d.now(), SWEEP_BATCH);
    for (const s of expired) {
      const approval = pendingOf(s).approval;
      const expiredUnanswered = `approval ${approval?.approvalId ?? ""} expired unanswered`;
      // An approval to settle an unknown outcome: the earlier attempt may have taken effect, and the answer says so.
      const answer =
        approval?.kind === "outcome_unknown"
          ? `${expiredUnanswered}; ${approval.tool} was not re-sent, and ${effectUnknown(approval.tool)}`
          : expiredUnanswered;
      const context = approval
        ? contextJson({
            ...contextOf(s),
            expiredApproval: {
              approvalId: approval.approvalId,
              argumentsHash: approval.argumentsHash,
              expiresAt: approval.expiresAt,
            },
          })
        : undefined;
      const options = { fenced: false, ...(context ? { patch: { context } } : {}) };
      await d.moves.stop(s, "approval_denied", answer, options).catch((error: unknown) => {
        if (!(error instanceof StaleTransitionError)) throw error;
      });
    }
    if (expired.length < SWEEP_BATCH) return;
  }
}
