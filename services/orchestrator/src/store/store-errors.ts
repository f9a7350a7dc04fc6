// The errors of the SessionStore contract: what a caller of any backend may catch and what each means.
import type { SessionState } from "../session/session-state.js";

/** The session moved on (or is not in `from`) since the caller read it; reload and decide again. */
export class StaleTransitionError extends Error {
  override readonly name: string = "StaleTransitionError";
  constructor(
    readonly sessionId: string,
    readonly expected: { state: SessionState; version: number },
    readonly actual: { state: SessionState; version: number },
    message?: string,
  ) {
    super(
      message ?? `session ${sessionId} is ${actual.state}@${actual.version}, not ${expected.state}@${expected.version}`,
    );
  }
}

/** The caller's lease is gone or expired, so another replica may own the session now. */
export class LeaseLostError extends StaleTransitionError {
  override readonly name = "LeaseLostError";
  constructor(
    sessionId: string,
    state: { state: SessionState; version: number },
    readonly owner: string,
    readonly leaseOwner: string | null,
  ) {
    super(
      sessionId,
      state,
      state,
      `session ${sessionId}: lease not held by ${owner} (holder: ${leaseOwner ?? "none"})`,
    );
  }
}

export class SessionNotFoundError extends Error {
  override readonly name = "SessionNotFoundError";
  constructor(readonly sessionId: string) {
    super(`session ${sessionId} not found`);
  }
}

/** Same id, different (or no) idempotency key: a caller bug, not a retry. */
export class SessionExistsError extends Error {
  override readonly name = "SessionExistsError";
  constructor(readonly sessionId: string) {
    super(`session ${sessionId} already exists`);
  }
}

/** The creator already has `limit` sessions in flight (NewSession.maxInFlight): nothing was created. */
export class SessionQuotaExceededError extends Error {
  override readonly name = "SessionQuotaExceededError";
  constructor(
    readonly createdBy: string,
    readonly limit: number,
  ) {
    super(`${createdBy} already has ${limit} sessions in flight, the most one caller may have at once`);
  }
}

export class DuplicateStepError extends Error {
  override readonly name = "DuplicateStepError";
  constructor(
    readonly sessionId: string,
    readonly step: number,
  ) {
    super(`session ${sessionId} already has step ${step}`);
  }
}

/**
 * The database cannot serve right now (SQLite busy or I/O errors; PostgreSQL refused or lost the
 * connection, or a statement or lock timed out): the request was fine and may succeed later.
 * `operation` names the store method, e.g. "transition".
 */
export class StoreUnavailableError extends Error {
  override readonly name = "StoreUnavailableError";
  constructor(
    readonly operation: string,
    cause: unknown,
  ) {
    super(`session store unavailable (${operation}): ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
  }
}
