// Following a session: one snapshot (the session now), then its transitions and steps so far, then
// every new one as it is persisted, until the session ends, and last, if it ended while watched, an
// update (the session as it ended). A charge (work paid for without a move: SessionStore.charge)
// changes the usage but makes no transition: it is pushed as an update of the session, same
// version, new usage, so that what a watcher was last shown is what the session cost. Only the
// first is a snapshot, so a watcher never takes the session shown again for a new start.
import type { SessionFollower } from "../store/session-events.js";
import { isTerminal } from "./session-state.js";
import type { AuditRecord, SessionRecord, SessionStore, StepRecord } from "../store/session-store.js";

export type WatchEvent =
  | { readonly kind: "snapshot"; readonly session: SessionRecord }
  | { readonly kind: "update"; readonly session: SessionRecord }
  | { readonly kind: "transition"; readonly audit: AuditRecord }
  | { readonly kind: "step"; readonly step: StepRecord };

/**
 * How long after an end no run made (a cancel, an approval's expiry) while a model or tool call was
 * under way the stream stays open for that call's charge: the run it cut off charges it as it stops,
 * after the end (on another replica, once the abort announcement reached it), in milliseconds
 * unless the machine stalls. A charge later than that is still in GetSession.
 */
export const LATE_CHARGE_WAIT_MS = 2000;

/** States in which the session's run has a model or tool call under way, whose spend a move pays for. */
const WORKING: ReadonlySet<string> = new Set(["THINKING", "TOOL_EXECUTING"]);

/** Between changes it waits on the store's events (`changes`), reading only what is new when one arrives. */
export async function* watchSession(
  store: SessionStore,
  s: SessionRecord,
  changes: SessionFollower,
  signal: AbortSignal,
  lateChargeWaitMs = LATE_CHARGE_WAIT_MS,
): AsyncGenerator<WatchEvent> {
  yield { kind: "snapshot", session: s };
  let shown = s;
  let end: AuditRecord | undefined;
  let version = 0;
  let steps = 0;
  while (!signal.aborted) {
    const trail = await store.auditTrail(s.id, version);
    for (const audit of trail) {
      yield { kind: "transition", audit };
      version = audit.version;
      if (isTerminal(audit.to)) end = audit;
    }
    for (const step of await store.steps(s.id, steps)) {
      yield { kind: "step", step };
      steps = step.step;
    }
    if (end || isTerminal(s.state)) break;
    // Woken with no move to show: a charge (or a backstop, a resync) may have changed the usage.
    const now = trail.length === 0 ? await store.get(s.id) : null;
    if (now && now.version === version && differs(now, shown)) {
      yield { kind: "update", session: now };
      shown = now;
    }
    await changes.next(signal);
  }
  yield* ending(store, shown, lateChargeWaitUntil(end, lateChargeWaitMs), changes, signal);
}

/** Until when (epoch ms) an end may still be followed by the charge of a call it cut off; 0 for none. */
function lateChargeWaitUntil(end: AuditRecord | undefined, waitMs: number): number {
  if (!end || end.owner !== null || !WORKING.has(end.from)) return 0;
  return Math.min(end.at, Date.now()) + waitMs;
}

/** The session as it ended, and each charge made to it up to `until`, as updates of what differs from `shown`. */
async function* ending(
  store: SessionStore,
  shown: SessionRecord,
  until: number,
  changes: SessionFollower,
  signal: AbortSignal,
): AsyncGenerator<WatchEvent> {
  while (!signal.aborted) {
    const now = await store.get(shown.id);
    if (now && differs(now, shown)) {
      yield { kind: "update", session: now };
      shown = now;
    }
    const left = until - Date.now();
    if (left <= 0) return;
    await changes.next(signal, left);
  }
}

function differs(a: SessionRecord, b: SessionRecord): boolean {
  return a.version !== b.version || JSON.stringify(a.usage) !== JSON.stringify(b.usage);
}
