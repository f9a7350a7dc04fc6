// The trace-id rule: one trace per session, whatever replica or restart drives it.
import { createHash } from "node:crypto";
import type { SessionRecord } from "../store/session-store.js";

/** The trace id derived from a session id (the first 32 hex digits of its SHA-256). */
export function traceIdOf(sessionId: string): string {
  return createHash("sha256").update(sessionId).digest("hex").slice(0, 32);
}

/** The session's trace id: the one its context keeps, else the one derived from its id. */
export function sessionTraceId(s: Pick<SessionRecord, "id" | "context">): string {
  return typeof s.context.traceId === "string" ? s.context.traceId : traceIdOf(s.id);
}
