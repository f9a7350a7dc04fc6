// A session's move as the store tests write it: the four fields every move names, audited at the
// test's clock unless the test says otherwise, and whatever else the test adds.
import type { SessionState } from "../src/session/session-state.js";
import type { SessionRecord, SessionStore, TransitionInput } from "../src/store/session-store.js";

export type Move = (
  store: SessionStore,
  id: string,
  from: SessionState,
  to: SessionState,
  expectedVersion: number,
  extra?: Partial<TransitionInput>,
) => Promise<SessionRecord>;

/** `store.transition` audited at `now()`; `extra` adds any other field or overrides one, `audit` included. */
export function movesAt(now: () => number): Move {
  return (store, id, from, to, expectedVersion, extra = {}) =>
    store.transition({ id, from, to, expectedVersion, audit: { at: now() }, ...extra });
}
