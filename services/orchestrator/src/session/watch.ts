// Following a session: the session now, then its transitions and steps so far, then every new one
// as it is persisted, until the session ends.
import type { SessionFollower } from "../store/session-events.js";
import { isTerminal } from "./session-state.js";
import type { AuditRecord, SessionRecord, SessionStore, StepRecord } from "../store/session-store.js";

export type WatchEvent =
  | { readonly kind: "snapshot"; readonly session: SessionRecord }
  | { readonly kind: "transition"; readonly audit: AuditRecord }
  | { readonly kind: "step"; readonly step: StepRecord };

/** Between changes it waits on the store's events (`changes`), reading only what is new when one arrives. */
export async function* watchSession(
  store: SessionStore,
  s: SessionRecord,
  changes: SessionFollower,
  signal: AbortSignal,
): AsyncGenerator<WatchEvent> {
  yield { kind: "snapshot", session: s };
  let ended = isTerminal(s.state);
  let version = 0;
  let steps = 0;
  while (!signal.aborted) {
    for (const audit of await store.auditTrail(s.id, version)) {
      yield { kind: "transition", audit };
      version = audit.version;
      ended ||= isTerminal(audit.to);
    }
    for (const step of await store.steps(s.id, steps)) {
      yield { kind: "step", step };
      steps = step.step;
    }
    if (ended) return;
    await changes.next(signal);
  }
}
