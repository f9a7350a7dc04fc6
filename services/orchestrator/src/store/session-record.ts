// A session as the store keeps it: its record, what creating one takes, its budget and usage.
import type { SessionState, StopReason } from "../session/session-state.js";

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** The budget vector's limits; each maps to the stop reason of the same name. */
export interface BudgetLimits {
  readonly maxSteps: number;
  readonly maxToolCalls: number;
  readonly maxTokens: number;
  readonly maxCostMicros: number;
  /** Wall-clock milliseconds from `usage.startedAt` until the `deadline` stop reason. */
  readonly deadlineMs: number;
  /** Retries of model and tool calls the session may make in all; absent in records from before it existed (the default applies). */
  readonly maxRetries?: number;
}

/** What a piece of work cost: a model call's tokens (prompt and reply) and their price, or a tool call's price. */
export interface Spend {
  readonly tokens: number;
  readonly costMicros: number;
  /** Tool calls it made, when it is charged apart from a move (the host's own live reads: see SessionStore.charge); absent, none. */
  readonly toolCalls?: number;
  /** Attempts of those calls past each one's first (retries, hedges), added to Usage.retries with them; absent, none. */
  readonly retries?: number;
}

/** What a session has spent so far, against its BudgetLimits. */
export interface Usage {
  readonly steps: number;
  readonly toolCalls: number;
  readonly tokens: number;
  readonly costMicros: number;
  /** Epoch milliseconds. */
  readonly startedAt: number;
  /** Model calls retried by the runner plus (attempts - 1) of every tool call, a call sent again after a stop or crash cut it off included. */
  readonly retries?: number;
  /**
   * Times a replica took the session over from another that held its lease and let it run out (a
   * crash, a kill, a stall past the lease), counted by the claim itself. Absent until the first.
   */
  readonly takeovers?: number;
}

export interface NewSession {
  readonly id: string;
  readonly goal: string;
  readonly task: JsonObject;
  readonly budget: BudgetLimits;
  readonly scopes: readonly string[];
  readonly policy: string;
  /** The authenticated subject that asked for the session (who granted its scopes). */
  readonly createdBy: string;
  /**
   * A second create by the same creator with the same key returns the first session instead of
   * making another; keys of different creators never meet.
   */
  readonly idempotencyKey?: string;
  /** Hash of the whole canonical start request, so a reused key with another request is caught. */
  readonly requestHash?: string;
  /**
   * The most sessions `createdBy` may have in flight (not in a terminal state), counting this one.
   * Checked atomically with the insert (on PostgreSQL serialised per creator, so replicas creating
   * at once cannot pass it together); past it the create throws SessionQuotaExceededError and
   * writes nothing. A key that already made a session returns that session whatever the count.
   */
  readonly maxInFlight?: number;
  /**
   * Creates the session already leased to `owner` (the replica that will drive it at once), so
   * no claim is needed; without it the session waits for the next claim.
   */
  readonly lease?: { readonly owner: string; readonly ttlMs: number };
  /**
   * The caller's call: a create whose write has not begun when the call ends (cancelled, past its
   * deadline, the server draining), e.g. one still waiting for its turn, is not made and fails with
   * the signal's reason.
   */
  readonly signal?: AbortSignal;
}

export interface SessionRecord {
  readonly id: string;
  readonly state: SessionState;
  /** Number of transitions so far; equals the number of audit rows. */
  readonly version: number;
  readonly goal: string;
  readonly task: JsonObject;
  readonly budget: BudgetLimits;
  readonly usage: Usage;
  readonly context: JsonObject;
  /** The action in flight (e.g. a tool call awaiting its result or an approval), if any. */
  readonly pending: JsonObject | null;
  readonly scopes: readonly string[];
  readonly policy: string;
  readonly stopReason: StopReason | null;
  readonly answer: string | null;
  /** Epoch milliseconds. */
  readonly createdAt: number;
  readonly updatedAt: number;
  readonly leaseOwner: string | null;
  readonly leaseExpiresAt: number | null;
  readonly idempotencyKey: string | null;
  readonly createdBy: string;
  readonly requestHash: string | null;
}
