// What both session stores share beyond the contract: lease rules, listeners, the moves of a
// transition, list cursors and argument checks.
import { assertTransition, isTerminal, SESSION_STATES, type SessionState } from "../session/session-state.js";
import type {
  AuditInput,
  SessionEvent,
  SessionListener,
  SessionRecord,
  Spend,
  TransitionInput,
  Usage,
} from "./session-store.js";

/** States whose entry releases the session's lease: nobody drives a session that ended, waits for a human or is parked. */
export function releasesLease(state: SessionState): boolean {
  return isTerminal(state) || state === "AWAITING_APPROVAL" || state === "PARKED";
}

/** A store's subscribers; a listener that throws is not allowed to stop the others from hearing. */
export class SessionListeners {
  readonly #listeners = new Set<SessionListener>();

  add(listener: SessionListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get size(): number {
    return this.#listeners.size;
  }

  emit(event: SessionEvent): void {
    for (const listener of this.#listeners) {
      try {
        listener(event);
      } catch {
        // A listener's failure is its own; the commit it hears about stands.
      }
    }
  }
}

/** One move of a transition: its edge, the version it produces and its audit row. */
export interface Move {
  readonly from: SessionState;
  readonly to: SessionState;
  readonly version: number;
  readonly audit: AuditInput;
}

/**
 * The moves a transition makes, `via` first, each checked against TRANSITIONS; throws
 * IllegalTransitionError before anything is written.
 */
export function movesOf(t: TransitionInput): Move[] {
  const moves: Move[] = [];
  let from = t.from;
  for (const hop of t.via ?? []) {
    assertTransition(from, hop.state, null);
    moves.push({ from, to: hop.state, version: t.expectedVersion + moves.length + 1, audit: hop.audit });
    from = hop.state;
  }
  assertTransition(from, t.to, t.patch?.stopReason);
  moves.push({ from, to: t.to, version: t.expectedVersion + moves.length + 1, audit: t.audit });
  return moves;
}

/** Oldest first, then by id: the order lists and claims return sessions in. */
export const byCreated = (a: SessionRecord, b: SessionRecord): number =>
  a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** When a PARKED session is due (`pending.park.wakeAt`); 0 for any other. */
export function wakeAtOf(s: SessionRecord): number {
  const park = (s.pending as { park?: { wakeAt?: unknown } } | null)?.park;
  return typeof park?.wakeAt === "number" ? park.wakeAt : 0;
}

/** A session's spend as its stored usage holds it; `retries` absent when the usage has none. */
export type StoredSpend = Required<Omit<Spend, "retries">> & Pick<Spend, "retries">;

/** What `usage` adds to the spend of `from`, the record a move starts from (see MoveParams.tokensAdded). */
export function spendAdded(from: Usage, usage: Usage): Required<Spend> {
  return {
    tokens: usage.tokens - from.tokens,
    costMicros: usage.costMicros - from.costMicros,
    toolCalls: usage.toolCalls - from.toolCalls,
    retries: (usage.retries ?? 0) - (from.retries ?? 0),
  };
}

/** `usage` with the spend the store holds (a charge may have added to it since): `usage` itself when they agree. */
export function withStoredSpend(usage: Usage, { retries, ...spent }: StoredSpend): Usage {
  const { tokens, costMicros, toolCalls } = usage;
  if (
    spent.tokens === tokens &&
    spent.costMicros === costMicros &&
    spent.toolCalls === toolCalls &&
    retries === usage.retries
  )
    return usage;
  return { ...usage, ...spent, ...(retries === undefined ? {} : { retries }) };
}

export function initialUsage(startedAt: number): Usage {
  return { steps: 0, toolCalls: 0, tokens: 0, costMicros: 0, startedAt };
}

export interface Cursor {
  readonly createdAt: number;
  readonly id: string;
}

export function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify([c.createdAt, c.id])).toString("base64url");
}

export function decodeCursor(s: string): Cursor {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(s, "base64url").toString("utf8"));
  } catch {
    parsed = undefined;
  }
  // A time the store can compare with: 1e400 parses as Infinity, which no database column holds.
  if (!Array.isArray(parsed) || !Number.isSafeInteger(parsed[0]) || parsed[0] < 0 || typeof parsed[1] !== "string") {
    throw new RangeError("invalid list cursor");
  }
  return { createdAt: parsed[0], id: parsed[1] };
}

export function checkLimit(limit: number, name = "limit"): void {
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) {
    throw new RangeError(`${name} must be an integer in [1, 10000], got ${limit}`);
  }
}

export function checkTtl(ttlMs: number): void {
  if (!Number.isInteger(ttlMs) || ttlMs < 1) throw new RangeError(`ttlMs must be a positive integer, got ${ttlMs}`);
}

export function emptyCounts(): Record<SessionState, number> {
  return Object.fromEntries(SESSION_STATES.map((state) => [state, 0])) as Record<SessionState, number>;
}
