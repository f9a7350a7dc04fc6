// The one persistence contract the orchestrator runs on. SQLite (one process) and PostgreSQL
// (several replicas sharing sessions through leases) implement it, and the same test suite
// holds both to it: see test/session-store.suite.ts.
import type {
  HandSettlement,
  MoneyChange,
  OtherEffects,
  Reservation,
  ReservationRecord,
} from "./effect-reservations.js";
import type { SessionState, StopReason } from "../session/session-state.js";
import type { JsonObject, NewSession, SessionRecord, Spend, Usage } from "./session-record.js";
import type { StoreUnavailableError } from "./store-errors.js";

export * from "./session-record.js";
export * from "./store-errors.js";

/** What the entry/exit hooks record about one transition. */
export interface AuditInput {
  /** Epoch milliseconds; also becomes the session's `updatedAt`. */
  readonly at: number;
  readonly reason?: string;
  readonly tool?: string;
  readonly argsHash?: string;
  readonly expectedTimeoutMs?: number;
  readonly outcome?: string;
}

export interface SessionPatch {
  readonly usage: Usage;
  readonly context: JsonObject;
  /** `null` clears the pending action; leaving the field out keeps it. */
  readonly pending: JsonObject | null;
  readonly stopReason: StopReason;
  readonly answer: string | null;
}

/** A state a transition passes through on its way to `to`, with that move's own audit row. */
export interface TransitionHop {
  readonly state: SessionState;
  readonly audit: AuditInput;
}

export interface TransitionInput {
  readonly id: string;
  readonly from: SessionState;
  readonly to: SessionState;
  readonly expectedVersion: number;
  /**
   * Non-terminal states passed through between `from` and `to`, in order. Each move is a legal
   * edge with its own version and audit row, and all of them commit together or not at all;
   * `patch` and `step` apply with the last move.
   */
  readonly via?: readonly TransitionHop[];
  readonly patch?: Partial<SessionPatch>;
  readonly audit: AuditInput;
  /** When set, the transition is refused unless this owner holds an unexpired lease. */
  readonly owner?: string;
  /**
   * The step record this transition completes, written in the same transaction: a step is
   * stored exactly when the transition that counts it commits. DuplicateStepError (nothing
   * written) when the number is taken.
   */
  readonly step?: StepRecord;
  /**
   * Money reserved (checked against its limits: ReservationRefusedError, nothing written, above
   * any) or settled in the same transaction as the move, so a call is recorded exactly when its
   * amount is held. See effect-reservations.ts.
   */
  readonly money?: MoneyChange;
  /**
   * The record the caller moves from (as the store returned it, at `expectedVersion`). When
   * given, the store may build the result from it and the patch instead of reading the whole
   * row back; the optimistic lock guarantees the row still matches it, except for the tokens,
   * price, tool calls and retries that `charge` added since: the patch's usage is written as the
   * stored usage plus what the patch adds to this record's, and the result carries the stored figures.
   */
  readonly current?: SessionRecord;
}

export interface AuditRecord {
  readonly sessionId: string;
  /** The session version this transition produced (1 for the first transition). */
  readonly version: number;
  readonly from: SessionState;
  readonly to: SessionState;
  readonly at: number;
  readonly reason: string | null;
  readonly tool: string | null;
  readonly argsHash: string | null;
  readonly expectedTimeoutMs: number | null;
  readonly outcome: string | null;
  readonly owner: string | null;
}

export interface StepRecord {
  /** 1-based, unique per session. */
  readonly step: number;
  readonly at: number;
  readonly payload: JsonObject;
  /** `payload` as JSON, when the writer already serialised it (written as is, not again). */
  readonly json?: string;
}

/**
 * Whose sessions a list or a count covers: those `createdBy` created and, with `waiting`, every
 * session waiting for an approval (AWAITING_APPROVAL) whoever created it.
 */
export interface SessionReader {
  readonly createdBy: string;
  readonly waiting: boolean;
}

export interface ListQuery {
  readonly state?: SessionState;
  readonly limit: number;
  /** `nextCursor` of the previous page. */
  readonly after?: string;
  /** Only the sessions this reader sees, filtered by the query itself (pages stay full); absent, every session. */
  readonly visibleTo?: SessionReader;
}

export interface SessionPage {
  readonly sessions: SessionRecord[];
  /** Null on the last page. */
  readonly nextCursor: string | null;
}

/**
 * What a store tells its subscribers, after the commit: a session was created, moved, or let go
 * of its lease (so another replica may claim it); "charged": its usage changed without a move (see
 * `charge`); or "resync": changes may have been missed (a PostgreSQL listening connection was lost
 * and is back), so anything waiting should read again.
 */
export type SessionEvent =
  | {
      readonly kind: "changed";
      readonly id: string;
      readonly version: number;
      readonly state: SessionState;
      readonly leaseOwner: string | null;
    }
  | { readonly kind: "charged"; readonly id: string }
  | { readonly kind: "resync" };

export type SessionListener = (event: SessionEvent) => void;

export interface SessionStore {
  /** Throws SessionExistsError (the id is taken without a matching key) or SessionQuotaExceededError (see `maxInFlight`). */
  create(input: NewSession): Promise<{ session: SessionRecord; created: boolean }>;
  get(id: string): Promise<SessionRecord | null>;
  /** Oldest first, by (createdAt, id); keyset pagination, so pages neither repeat nor skip rows. */
  list(query: ListQuery): Promise<SessionPage>;
  /** Sessions by state: those `visibleTo` sees (as `list` filters them), or every session. */
  countByState(visibleTo?: SessionReader): Promise<Record<SessionState, number>>;
  /**
   * Moves a session (through `via`, when given) and writes one audit row per move in one
   * transaction, under an optimistic lock on (state, version). Throws IllegalTransitionError
   * (nothing written), StaleTransitionError, LeaseLostError or SessionNotFoundError. Entering a
   * terminal state or AWAITING_APPROVAL also releases the lease (see releasesLease).
   */
  transition(t: TransitionInput): Promise<SessionRecord>;
  /** The session's step records by step number (each written by the transition that completed it), after step `afterStep`. */
  steps(sessionId: string, afterStep?: number): Promise<StepRecord[]>;
  /** Oldest first, from the transition after version `afterVersion`. */
  auditTrail(sessionId: string, afterVersion?: number): Promise<AuditRecord[]>;
  /**
   * Atomically leases up to `limit` sessions whose lease is absent or expired (oldest first) to
   * `owner` for `ttlMs`: live ones, except those waiting for a human (AWAITING_APPROVAL), which
   * hold no lease until an approval moves them on, and those waiting for a tool (PARKED: see wake). Two concurrent claims never return the same
   * session.
   */
  claim(owner: string, ttlMs: number, limit: number): Promise<SessionRecord[]>;
  /**
   * Atomically leases up to `limit` PARKED sessions that are due to `owner` for `ttlMs`, in wake
   * order (`pending.park.wakeAt`, then age): those whose wake time has come, and those parked on a
   * tool in `recovered` (tool → epoch ms it recovered at) before it recovered. One statement for
   * every parked session: nothing polls a parked session by itself.
   */
  wake(
    owner: string,
    ttlMs: number,
    limit: number,
    recovered?: Readonly<Record<string, number>>,
  ): Promise<SessionRecord[]>;
  /** Sessions that wait too long: approvals past their expiry, and parked sessions with less than a fifth of their wall clock left. */
  overdue(now: number): Promise<{ approvals: number; parkedNearDeadline: number }>;
  /**
   * Extends `owner`'s leases on `ids` by `ttlMs`, in one statement; returns the ids it still held
   * (an unexpired lease on a live session). One round trip for every session a replica drives:
   * renewing them one by one fell behind the lease under load, and their leases expired.
   */
  renewLeases(ids: readonly string[], owner: string, ttlMs: number): Promise<Set<string>>;
  /** False when `owner` did not hold the lease. */
  releaseLease(id: string, owner: string): Promise<boolean>;
  /**
   * Adds what work cost (a model call's tokens and price, a tool call's price, and tool calls the
   * host makes for its own checks, its live reads, with theirs and their retries, in one statement)
   * to the usage of a session that moved on while it was under way, or that no move of its own pays
   * for, so its usage says what it cost:
   * `spend` when the session has ended (a cancel, an expiry, a stop made by another replica: nobody
   * does the work again), `live` when it is live (under another run after a lost lease, that run
   * sends a tool call again and pays for it then, so `live` is what nobody pays for again). No new version
   * and no audit row: a live session's next move keeps the charge, because every move that has the
   * record it moves from (`current`) writes its usage relative to that record's. Subscribers hear
   * it as "charged" (a WatchSession pushes the session's new usage). Returns whether the
   * session had ended, or undefined when there is no such session.
   */
  charge(id: string, spend: Spend, live: Spend): Promise<"ended" | "live" | undefined>;
  /**
   * What other effects than `r` hold on its entity, and hold or made for its customer (since
   * `customerSince`, in its currency) and its session (in its currency). A read without a lock:
   * the totals a reserve checks are summed again inside its transaction.
   */
  otherEffects(r: Reservation, customerSince: number): Promise<OtherEffects>;
  /** The session's reservations, oldest first. */
  reservations(sessionId: string): Promise<ReservationRecord[]>;
  /**
   * Settles by hand a reservation the session still holds (see HandSettlement), with the totals, in one
   * transaction; the reservation as it is now, or undefined (nothing written) when it holds none of that key.
   */
  settleHeld(s: HandSettlement): Promise<ReservationRecord | undefined>;
  /**
   * Up to `limit` sessions in AWAITING_APPROVAL whose approval (`pending.approval.expiresAt`)
   * expired at or before `now`, oldest first.
   */
  expiredApprovals(now: number, limit: number): Promise<SessionRecord[]>;
  /**
   * Deletes up to `limit` step rows written before `before` (epoch ms) of sessions that have ended
   * (a live session's rows are never touched); returns how many went. Safe to run on several
   * replicas at once: PostgreSQL skips rows another replica is deleting, SQLite has one writer.
   */
  pruneSteps(before: number, limit: number): Promise<number>;
  /** When the oldest step row kept was written (epoch ms), or null when there is none. */
  oldestStepAt(): Promise<number | null>;
  /**
   * Calls `listener` after every committed change of a session: creation, transition (once per
   * transition, with its final version), lease release, charge. Returns the unsubscribe function. SQLite
   * tells the listeners of the store instance that committed; PostgreSQL tells every store
   * instance on the database (every replica), through LISTEN/NOTIFY.
   */
  subscribe(listener: SessionListener): () => void;
  /**
   * Asks whichever replica runs the session to stop its run (as a cancel stops the run on its own
   * replica: an irreversible call in flight is recorded first). PostgreSQL tells every store
   * instance on the database through NOTIFY, and marks it: one whose listening connection was lost
   * meanwhile hears it once listening again. SQLite does nothing: its one process aborts its own run itself.
   */
  announceAbort(id: string): Promise<void>;
  /** Calls `listener` with the session of every abort announced (see announceAbort); returns the unsubscribe function. */
  onAbort(listener: (id: string) => void): () => void;
  /** Stores a patrol run (its id unique); `finishedAt` (epoch ms) orders them. */
  recordPatrolRun(run: PatrolRunRow): Promise<void>;
  /** Up to `limit` patrol runs, the newest (by finish) first. */
  patrolRuns(limit: number): Promise<PatrolRunRow[]>;
  close(): Promise<void>;
}

/** A patrol run as stored: the contract's PatrolRun in protobuf JSON, ordered by when it finished. */
export interface PatrolRunRow {
  readonly runId: string;
  readonly finishedAt: number;
  readonly run: JsonObject;
}

export interface SessionStoreOptions {
  /**
   * Epoch milliseconds; creation and update times are read from it, and SQLite's lease expiry.
   * PostgreSQL measures leases by the database's clock, so replicas whose clocks disagree
   * neither steal nor keep a lease wrongly.
   */
  readonly now?: () => number;
  /** Told of every StoreUnavailableError the store throws (e.g. to count it). */
  readonly onUnavailable?: (error: StoreUnavailableError) => void;
}
