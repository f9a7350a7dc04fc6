// The rows and named parameters the SQL session stores share: what a backend's statements bind
// and return, built and read here once for both databases (see sql-session-store.ts).
import { itemJson } from "../api/history-json.js";
import type { SessionState, StopReason } from "../session/session-state.js";
import type { AuditRecord, JsonObject, JsonValue, SessionReader, Spend, TransitionInput } from "./session-store.js";
import { movesOf, releasesLease, spendAdded, type StoredSpend } from "./session-store-support.js";
import { storable, storableJson } from "./storable-text.js";

/** The migration ledger's name for the session tables (see @loopguard/sql-store's migrate). */
export const SESSIONS_MIGRATION_STORE = "orchestrator-sessions";

/** A sessions row; JSON columns arrive as text (SQLite) or parsed (PostgreSQL): see `json`. */
export interface SessionRow {
  id: string;
  state: SessionState;
  version: number;
  goal: string;
  task: unknown;
  budget: unknown;
  usage: unknown;
  context: unknown;
  pending: unknown;
  scopes: unknown;
  policy: string;
  stop_reason: StopReason | null;
  answer: string | null;
  created_at: number;
  updated_at: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  idempotency_key: string | null;
  /** Number of session_history rows; NULL when the context has no history. */
  history_len: number | null;
  created_by: string;
  request_hash: string | null;
  /** The session_history items as one JSON array, where the query gathers them. */
  history?: unknown;
}

export interface AuditRow {
  session_id: string;
  version: number;
  from_state: SessionState;
  to_state: SessionState;
  at: number;
  reason: string | null;
  tool: string | null;
  args_hash: string | null;
  expected_timeout_ms: number | null;
  outcome: string | null;
  owner: string | null;
}

export interface StepRow {
  step: number;
  at: number;
  payload: unknown;
}

/** Named parameters of a create: `leaseExpiresAt` by the store's clock, `leaseTtlMs` for a database that measures by its own. */
export interface InsertParams {
  id: string;
  goal: string;
  task: string;
  budget: string;
  usage: string;
  scopes: string;
  policy: string;
  now: number;
  leaseOwner: string | null;
  leaseTtlMs: number | null;
  leaseExpiresAt: number | null;
  idempotencyKey: string | null;
  createdBy: string;
  requestHash: string | null;
  /** NewSession.maxInFlight; null: no quota. */
  maxInFlight: number | null;
}

/**
 * Named parameters of one move of a transition, with its audit row; the last move also carries
 * the patch and the step. Flags are 0/1 (SQLite binds no booleans). The history is written as
 * rows: `historyKept` leading items stay, `historyItems` (JSON array text) follow them.
 */
export interface MoveParams {
  id: string;
  from: SessionState;
  to: SessionState;
  expectedVersion: number;
  version: number;
  at: number;
  owner: string | null;
  now: number;
  releasesLease: 0 | 1;
  setUsage: 0 | 1;
  usage: string | null;
  /**
   * What the patch's usage adds to the tokens, price, tool calls and retries of the record moved
   * from (`current`): written on top of the stored figures, so a charge made since
   * (SessionStore.charge) stays. Null without `current`: the patch's usage is written as it is.
   */
  tokensAdded: number | null;
  costAdded: number | null;
  toolCallsAdded: number | null;
  retriesAdded: number | null;
  setContext: 0 | 1;
  context: string | null;
  historyLen: number | null;
  historyKept: number;
  historyItems: string[];
  setPending: 0 | 1;
  pending: string | null;
  setAnswer: 0 | 1;
  answer: string | null;
  stopReason: StopReason | null;
  reason: string | null;
  tool: string | null;
  argsHash: string | null;
  expectedTimeoutMs: number | null;
  outcome: string | null;
  step: number | null;
  stepAt: number | null;
  stepPayload: string | null;
}

/**
 * Which sessions a page or a count covers (see SessionReader): every one, those `createdBy`
 * created, or those and every session waiting for an approval.
 */
export type Visibility = "all" | "own" | "ownOrWaiting";

export interface VisibilityParams {
  visibility: Visibility;
  /** The reader's subject; null when the visibility is "all". */
  createdBy: string | null;
}

/** A reader's visibility, narrowed by the state asked for, so each backend has one query per case. */
export function visibilityOf(reader: SessionReader | undefined, state: SessionState | null): VisibilityParams {
  if (!reader) return { visibility: "all", createdBy: null };
  // A reader who sees every waiting session and asks only for those sees what everyone sees.
  if (reader.waiting && state === "AWAITING_APPROVAL") return { visibility: "all", createdBy: null };
  return { visibility: reader.waiting && state === null ? "ownOrWaiting" : "own", createdBy: reader.createdBy };
}

export interface PageParams extends VisibilityParams {
  state: SessionState | null;
  limit: number;
  afterAt: number | null;
  afterId: string | null;
}

export interface ClaimParams {
  owner: string;
  ttlMs: number;
  now: number;
  expiresAt: number;
  limit: number;
}

/** A wake: ClaimParams, and the recovered tools as a JSON object (tool → epoch ms). */
export interface WakeParams extends ClaimParams {
  recovered: string;
}

/** What a backend's transition gives back: the row, or (when the caller passed `current`) the lease and the stored spend. */
export type Moved =
  | { readonly row: SessionRow }
  | { readonly lease: { owner: string | null; expiresAt: number | null }; readonly spent: StoredSpend };

/** A charge (SessionStore.charge): what an ended session is charged, and what a live one is. */
export interface ChargeParams extends Required<Spend> {
  id: string;
  liveTokens: number;
  liveCostMicros: number;
  liveToolCalls: number;
  liveRetries: number;
}

/** Thrown by a backend when a move's optimistic-lock UPDATE changed no row; the store then reads why. */
export class NotApplied extends Error {
  override readonly name = "NotApplied";
}

/** How a backend classifies its driver's errors. */
export type ErrorKind = "unavailable" | "illegal" | "duplicate" | "other";

function historyDelta(
  history: JsonValue | undefined,
  before: JsonValue | undefined,
): { kept: number; items: string[] } {
  const items = Array.isArray(history) ? history : [];
  // The same items, by identity, then more: only the new ones are written.
  const kept =
    Array.isArray(before) && before.length <= items.length && before.every((item, i) => items[i] === item)
      ? before.length
      : 0;
  return { kept, items: items.slice(kept).map(itemJson) };
}

function withoutHistory(context: JsonObject): JsonObject {
  const { history: _history, ...rest } = context;
  return rest;
}

export function moveParams(t: TransitionInput, now: number): MoveParams[] {
  const moves = movesOf(t);
  const patch = t.patch ?? {};
  const delta =
    patch.context === undefined
      ? { kept: 0, items: [] }
      : historyDelta(patch.context.history, t.current?.context.history);
  const added = patch.usage && t.current ? spendAdded(t.current.usage, patch.usage) : undefined;
  return moves.map((move, i) => {
    const last = i === moves.length - 1;
    return {
      id: t.id,
      from: move.from,
      to: move.to,
      expectedVersion: move.version - 1,
      version: move.version,
      at: move.audit.at,
      owner: t.owner ?? null,
      now,
      releasesLease: releasesLease(move.to) ? 1 : 0,
      setUsage: last && patch.usage !== undefined ? 1 : 0,
      usage: last && patch.usage !== undefined ? JSON.stringify(patch.usage) : null,
      tokensAdded: last && added ? added.tokens : null,
      costAdded: last && added ? added.costMicros : null,
      toolCallsAdded: last && added ? added.toolCalls : null,
      retriesAdded: last && added ? added.retries : null,
      setContext: last && patch.context !== undefined ? 1 : 0,
      context: last && patch.context !== undefined ? storableJson(JSON.stringify(withoutHistory(patch.context))) : null,
      historyLen: last && Array.isArray(patch.context?.history) ? patch.context.history.length : null,
      historyKept: delta.kept,
      historyItems: last ? delta.items.map(storableJson) : [],
      setPending: last && patch.pending !== undefined ? 1 : 0,
      pending: last && patch.pending != null ? storableJson(JSON.stringify(patch.pending)) : null,
      setAnswer: last && patch.answer !== undefined ? 1 : 0,
      answer: last ? storable(patch.answer ?? null) : null,
      stopReason: last ? (patch.stopReason ?? null) : null,
      reason: storable(move.audit.reason ?? null),
      tool: storable(move.audit.tool ?? null),
      argsHash: move.audit.argsHash ?? null,
      expectedTimeoutMs: move.audit.expectedTimeoutMs ?? null,
      outcome: storable(move.audit.outcome ?? null),
      step: last && t.step ? t.step.step : null,
      stepAt: last && t.step ? t.step.at : null,
      stepPayload: last && t.step ? storableJson(t.step.json ?? JSON.stringify(t.step.payload)) : null,
    };
  });
}

export function toAudit(r: AuditRow): AuditRecord {
  return {
    sessionId: r.session_id,
    version: r.version,
    from: r.from_state,
    to: r.to_state,
    at: r.at,
    reason: r.reason,
    tool: r.tool,
    argsHash: r.args_hash,
    expectedTimeoutMs: r.expected_timeout_ms,
    outcome: r.outcome,
    owner: r.owner,
  };
}

/** The row a create inserts, as the database will hold it (for a backend that reads nothing back). */
export function insertedRow(p: InsertParams): SessionRow {
  return {
    id: p.id,
    state: "IDLE",
    version: 0,
    goal: p.goal,
    task: p.task,
    budget: p.budget,
    usage: p.usage,
    context: "{}",
    pending: null,
    scopes: p.scopes,
    policy: p.policy,
    stop_reason: null,
    answer: null,
    created_at: p.now,
    updated_at: p.now,
    lease_owner: p.leaseOwner,
    lease_expires_at: p.leaseExpiresAt,
    idempotency_key: p.idempotencyKey,
    history_len: null,
    created_by: p.createdBy,
    request_hash: p.requestHash,
  };
}
