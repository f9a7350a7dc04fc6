import { describe, expect, it } from "vitest";
import {
  assertTransition,
  canTransition,
  IllegalTransitionError,
  isTerminal,
  SESSION_STATES,
  TERMINAL_STATES,
  TRANSITION_PAIRS,
  TRANSITIONS,
  type SessionState,
} from "./session-state.js";

function reachable(from: SessionState): Set<SessionState> {
  const seen = new Set<SessionState>([from]);
  const queue = [from];
  for (let s = queue.shift(); s; s = queue.shift()) {
    for (const next of TRANSITIONS[s]) {
      if (seen.has(next)) continue;
      seen.add(next);
      queue.push(next);
    }
  }
  return seen;
}

describe("session state machine", () => {
  it("gives every state a row and only names known states", () => {
    expect(Object.keys(TRANSITIONS).sort()).toEqual([...SESSION_STATES].sort());
    for (const targets of Object.values(TRANSITIONS)) for (const t of targets) expect(SESSION_STATES).toContain(t);
    expect(TRANSITION_PAIRS).toHaveLength(Object.values(TRANSITIONS).reduce((n, t) => n + t.length, 0));
  });

  it("has no way out of DONE, FAILED or CANCELLED", () => {
    expect(TERMINAL_STATES.filter(isTerminal)).toEqual(["DONE", "FAILED", "CANCELLED"]);
    for (const s of TERMINAL_STATES) expect(TRANSITIONS[s]).toEqual([]);
  });

  it("reaches every state from IDLE and lets every live state be cancelled or failed", () => {
    expect([...reachable("IDLE")].sort()).toEqual([...SESSION_STATES].sort());
    for (const s of SESSION_STATES.filter((s) => !isTerminal(s))) {
      expect(canTransition(s, "CANCELLED")).toBe(true);
      expect(canTransition(s, "FAILED")).toBe(true);
    }
  });

  it("follows the documented loop", () => {
    expect(canTransition("IDLE", "THINKING")).toBe(true);
    expect(canTransition("THINKING", "TOOL_EXECUTING")).toBe(true);
    expect(canTransition("TOOL_EXECUTING", "OBSERVING")).toBe(true);
    expect(canTransition("OBSERVING", "THINKING")).toBe(true);
    expect(canTransition("OBSERVING", "DONE")).toBe(true);
    expect(canTransition("IDLE", "DONE")).toBe(false);
    expect(canTransition("FALLBACK", "THINKING")).toBe(false);
  });

  it("requires a stop reason exactly for terminal targets", () => {
    expect(() => assertTransition("THINKING", "DONE", undefined)).toThrow(IllegalTransitionError);
    expect(() => assertTransition("THINKING", "DONE", "bogus" as never)).toThrow(/unknown stop reason/);
    expect(() => assertTransition("THINKING", "TOOL_EXECUTING", "done")).toThrow(/only a terminal state/);
    expect(() => assertTransition("THINKING", "DONE", "done")).not.toThrow();
    expect(() => assertTransition("DONE", "THINKING", undefined)).toThrow(/DONE is terminal/);
    expect(() => assertTransition("NOPE" as SessionState, "THINKING", undefined)).toThrow(/unknown state/);
  });
});
