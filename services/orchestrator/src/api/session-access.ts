// Who may see and act on which session. A session belongs to the subject that started it: with
// sessions:read and sessions:write a caller reads, follows, lists and cancels its own sessions
// only. approvals:write also reads (never acts on) every session waiting for an approval, so that
// approvers see what they decide on; sessions:admin (an operator scope, never granted to a
// session) sees and acts on every session. A session a caller may not read does not exist for it.
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type Caller, methodPolicy } from "@loopguard/tool-sdk";
import { OrchestratorError } from "./orchestrator-error.js";
import type { WatchEvent } from "../session/watch.js";
import type { SessionReader, SessionRecord } from "../store/session-store.js";

/** Sees and acts on every caller's sessions; the contract declares it among the service's operator scopes. */
export const SESSIONS_ADMIN_SCOPE = "sessions:admin";

/** Answering approvals (ResolveApproval's scope) also lets a caller read the sessions waiting for one. */
export const APPROVER_SCOPE = methodPolicy(OrchestratorService.method.resolveApproval).requiredScope;

/** What the rules read of a session: whose it is and whether it waits. */
type Owned = Pick<SessionRecord, "id" | "state" | "createdBy">;

/** A caller as the session rules see it. */
export interface Viewer {
  readonly subject: string;
  readonly admin: boolean;
  readonly approver: boolean;
}

export function viewerOf(caller: Caller): Viewer {
  return {
    subject: caller.subject,
    admin: caller.scopes.has(SESSIONS_ADMIN_SCOPE),
    approver: caller.scopes.has(APPROVER_SCOPE),
  };
}

/** What `viewer` may do with `s`: act on it (and read it), read it only while it waits for an approval, or nothing. */
export function accessTo(viewer: Viewer, s: Owned): "act" | "read" | "none" {
  if (viewer.admin || s.createdBy === viewer.subject) return "act";
  return viewer.approver && s.state === "AWAITING_APPROVAL" ? "read" : "none";
}

/** The sessions `viewer` may list and count, as the store filters them; undefined: every session. */
export function readerOf(viewer: Viewer): SessionReader | undefined {
  return viewer.admin ? undefined : { createdBy: viewer.subject, waiting: viewer.approver };
}

/** The answer for a session that is not there for the caller: the same as for an id nobody used. */
export function sessionNotFound(id: string): OrchestratorError {
  return new OrchestratorError("SESSION_NOT_FOUND", `no session ${id}`);
}

/** `s` if `viewer` may read it; otherwise SESSION_NOT_FOUND, exactly as if it did not exist. */
export function readable<S extends Owned>(viewer: Viewer, s: S): S {
  if (accessTo(viewer, s) === "none") throw sessionNotFound(s.id);
  return s;
}

/** `s` if `viewer` may act on it (cancel it); NOT_SESSION_OWNER when it may only read it, SESSION_NOT_FOUND when not even that. */
export function actionable<S extends Owned>(viewer: Viewer, s: S): S {
  const access = accessTo(viewer, s);
  if (access === "act") return s;
  if (access === "none") throw sessionNotFound(s.id);
  throw new OrchestratorError(
    "NOT_SESSION_OWNER",
    `${viewer.subject} may read session ${s.id} while it waits for an approval, but only the subject that started it (or a holder of ${SESSIONS_ADMIN_SCOPE}) may act on it`,
  );
}

/**
 * A watch's events for a reader who may see the session only while it waits for an approval (`s`,
 * as read when the watch began): they end, with SESSION_NOT_FOUND, after the move out of waiting.
 * A step made after the session stopped waiting (read before the move that made it) is not shown.
 */
export async function* whileWaiting(events: AsyncGenerator<WatchEvent>, s: SessionRecord): AsyncGenerator<WatchEvent> {
  const movedOn = () =>
    new OrchestratorError(
      "SESSION_NOT_FOUND",
      `session ${s.id} no longer waits for an approval; only the subject that started it (or a holder of ${SESSIONS_ADMIN_SCOPE}) may follow it further`,
    );
  for await (const event of events) {
    if (event.kind === "step" && event.step.at > s.updatedAt) throw movedOn();
    yield event;
    if (event.kind === "transition" && event.audit.version > s.version) throw movedOn();
  }
}
