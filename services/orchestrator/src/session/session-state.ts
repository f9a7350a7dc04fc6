// The session state machine as data. Stores and the runner consult TRANSITIONS and nothing else,
// so the table is the single answer to "may a session go from A to B"; the stores also copy it
// into the database, where a trigger refuses any state change that is not in it.

export const SESSION_STATES = [
  "IDLE",
  "THINKING",
  "TOOL_EXECUTING",
  "OBSERVING",
  "RETRYING",
  "FALLBACK",
  "AWAITING_APPROVAL",
  "PARKED",
  "DONE",
  "FAILED",
  "CANCELLED",
] as const;

export type SessionState = (typeof SESSION_STATES)[number];

export const TERMINAL_STATES: readonly SessionState[] = ["DONE", "FAILED", "CANCELLED"];

/** Why a session stopped; required on entering a terminal state and forbidden otherwise. */
export const STOP_REASONS = [
  "done",
  "max_steps",
  "max_tool_calls",
  "max_tokens",
  "deadline",
  "max_cost",
  "no_progress",
  "permission_denied",
  "unrecoverable_error",
  "approval_denied",
  "cancelled",
  /** A tool the session needed stayed unavailable for as long as its wall clock allowed it to wait (PARKED). */
  "tool_unavailable",
] as const;

export type StopReason = (typeof STOP_REASONS)[number];

export const TRANSITIONS: Readonly<Record<SessionState, readonly SessionState[]>> = Object.freeze({
  IDLE: ["THINKING", "CANCELLED", "FAILED"],
  THINKING: ["TOOL_EXECUTING", "AWAITING_APPROVAL", "PARKED", "THINKING", "DONE", "FAILED", "CANCELLED"],
  // TOOL_EXECUTING -> TOOL_EXECUTING: the run that sends an approved call records itself first (execute.ts).
  TOOL_EXECUTING: [
    "TOOL_EXECUTING",
    "OBSERVING",
    "RETRYING",
    "FALLBACK",
    "AWAITING_APPROVAL",
    "PARKED",
    "FAILED",
    "CANCELLED",
  ],
  RETRYING: ["TOOL_EXECUTING", "FALLBACK", "PARKED", "FAILED", "CANCELLED"],
  FALLBACK: ["OBSERVING", "FAILED", "CANCELLED"],
  OBSERVING: ["THINKING", "DONE", "FAILED", "CANCELLED"],
  AWAITING_APPROVAL: ["TOOL_EXECUTING", "THINKING", "FAILED", "CANCELLED"],
  // Woken: the call it waits on goes out again (TOOL_EXECUTING), or the host plans it again (THINKING).
  PARKED: ["TOOL_EXECUTING", "THINKING", "AWAITING_APPROVAL", "FAILED", "CANCELLED"],
  DONE: [],
  FAILED: [],
  CANCELLED: [],
} satisfies Record<SessionState, readonly SessionState[]>);

/** Every allowed (from, to) pair, in table order; what the stores copy into the database. */
export const TRANSITION_PAIRS: readonly (readonly [SessionState, SessionState])[] = SESSION_STATES.flatMap((from) =>
  TRANSITIONS[from].map((to) => [from, to] as const),
);

export function isSessionState(value: unknown): value is SessionState {
  return typeof value === "string" && (SESSION_STATES as readonly string[]).includes(value);
}

export function isStopReason(value: unknown): value is StopReason {
  return typeof value === "string" && (STOP_REASONS as readonly string[]).includes(value);
}

export function isTerminal(state: SessionState): boolean {
  return TERMINAL_STATES.includes(state);
}

export function canTransition(from: SessionState, to: SessionState): boolean {
  return TRANSITIONS[from]?.includes(to) ?? false;
}

/** A transition the state machine does not allow; raised before anything is written. */
export class IllegalTransitionError extends Error {
  override readonly name = "IllegalTransitionError";
  constructor(
    readonly from: string,
    readonly to: string,
    readonly why: string,
  ) {
    super(`illegal transition ${from} -> ${to}: ${why}`);
  }
}

/**
 * Throws IllegalTransitionError unless `from -> to` is in TRANSITIONS and the stop reason fits:
 * present (and one of STOP_REASONS) exactly when `to` is terminal.
 */
export function assertTransition(
  from: SessionState,
  to: SessionState,
  stopReason: StopReason | null | undefined,
): void {
  if (!isSessionState(from) || !isSessionState(to)) {
    throw new IllegalTransitionError(String(from), String(to), "unknown state");
  }
  if (!canTransition(from, to)) {
    throw new IllegalTransitionError(
      from,
      to,
      isTerminal(from) ? `${from} is terminal` : "not in the transition table",
    );
  }
  const terminal = isTerminal(to);
  if (terminal && stopReason == null) {
    throw new IllegalTransitionError(from, to, "a terminal state needs a stop reason");
  }
  if (terminal && !isStopReason(stopReason)) {
    throw new IllegalTransitionError(from, to, `unknown stop reason ${String(stopReason)}`);
  }
  if (!terminal && stopReason != null) {
    throw new IllegalTransitionError(from, to, "only a terminal state carries a stop reason");
  }
}
