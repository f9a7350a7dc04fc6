// The one path that moves a session: every change of state — the runner's, a human's cancel,
// approval or deny, an expiry, a crash re-issue — is a persisted transition (state + version,
// with its audit rows) made here, and counted here (transitions, stops) and traced here (steps).
import type { MoneyChange } from "../store/effect-reservations.js";
import { redactText } from "../guard/redact.js";
import type { SessionState, StopReason } from "./session-state.js";
import {
  type AuditInput,
  type AuditRecord,
  type SessionPatch,
  SessionNotFoundError,
  type SessionRecord,
  type SessionStore,
  type Spend,
  StaleTransitionError,
  type StepRecord,
  StoreUnavailableError,
} from "../store/session-store.js";
import type { TraceSink } from "../governance/trace-sink.js";
import { contextJson, contextOf } from "./data.js";
import type { Outcome } from "./outcome.js";

/** A state a persisted transition passes through, with what its audit row says. */
export interface Via {
  readonly state: SessionState;
  readonly audit: Omit<AuditInput, "at">;
}

export interface MoveOptions {
  readonly audit: Omit<AuditInput, "at">;
  readonly patch?: Partial<SessionPatch>;
  /** The step this move completes, stored in the same transaction. */
  readonly step?: StepRecord;
  /** States passed on the way, each with its own audit row. */
  readonly via?: readonly Via[];
  /** Fenced by this replica's lease (the runner's moves); a human's move is not: the session may be leased to nobody. */
  readonly fenced?: boolean;
  /** Money reserved or settled in the same transaction (a refused reserve writes nothing: ReservationRefusedError). */
  readonly money?: MoneyChange;
  /**
   * What the patch's usage charges for work already done (a model call's tokens and price, a tool
   * call's price): should the session have moved on meanwhile (a cancel, another replica's stop or
   * takeover), the move fails, and this is charged to the session instead (see #spendFailed). Only
   * a run's moves, fenced by its lease, carry spend: settle tells them by their owner.
   */
  readonly spend?: Spend;
  /**
   * The work `spend` pays for is sent again should this move be lost (a tool call: re-issued under
   * its call id, and its price charged when that is observed), so a store outage carries none of it.
   */
  readonly spendReissued?: boolean;
}

export type StopOptions = Omit<MoveOptions, "audit">;

export interface MoveDeps {
  readonly store: SessionStore;
  readonly traces: TraceSink;
  /** Lease owner (this replica); every fenced transition is fenced by it. */
  readonly owner: string;
  readonly now: () => number;
  readonly onTransition?: (to: SessionState) => void;
  readonly onStopped?: (session: SessionRecord) => void;
  /** What the user got from a session that ends (see outcome.ts); stored in its context with the stop. */
  readonly outcomeOf?: (ended: SessionRecord) => Outcome | undefined;
  /** A move carrying `spend` failed: what became of the spend (see LateSpend). */
  readonly onLateSpend?: (s: SessionRecord, spend: Spend, fate: LateSpend, error?: unknown) => void;
}

/**
 * What became of the spend of a move that failed: charged to the session, which had ended or is
 * live under another run (a takeover after a lost lease); not charged, because the store failed to
 * take the charge (the one fate in which the spend reaches no session's usage); when the move itself
 * met a store outage, carried until the session is read again (see SessionMoves.settle); or, a tool's price
 * while the session is live, left to the call that the session sends again and pays for when it
 * observes it.
 */
export const LATE_SPEND_FATES = ["charged", "store_failed", "carried", "reissued"] as const;
export type LateSpend = (typeof LATE_SPEND_FATES)[number];

const NO_SPEND: Spend = { tokens: 0, costMicros: 0 };

/** Whether `spend` is something to charge: any tokens or money at all. */
function spends(spend: Spend | undefined): spend is Spend {
  return spend !== undefined && (spend.tokens > 0 || spend.costMicros > 0);
}

const STARTED: Via = { state: "THINKING", audit: { reason: "session started" } };

/** The states a move from `s` to `to` passes first: from IDLE, THINKING (the session's start). */
export function startOf(s: SessionRecord, to: SessionState): readonly Via[] {
  return s.state === "IDLE" && to !== "THINKING" ? [STARTED] : [];
}

/** Terminal state for a stop reason. */
export function terminalStateOf(reason: StopReason): SessionState {
  return reason === "done" ? "DONE" : reason === "cancelled" ? "CANCELLED" : "FAILED";
}

export class SessionMoves {
  /**
   * Spend whose move met a store outage, by session, each with the version its move started from:
   * the session waits for the store, and its run settles the spend when it reads the session again
   * or ends (see settle), so this holds no more than the sessions the replica runs.
   */
  readonly #carried = new Map<string, { readonly from: SessionRecord; readonly spend: Spend }[]>();

  constructor(private readonly deps: MoveDeps) {}

  /**
   * One persisted transition: through the `via` states, to `to`. From IDLE the session passes
   * THINKING first: its first decision is made before the start is stored, and both commit together.
   * `s` is the record as the store returned it (or as the move before predicted it), never one with
   * the patch's changes in it: the store writes the usage the patch adds to `s`'s on top of the
   * stored usage, which may hold charges `s` does not know of (see SessionStore.charge).
   */
  async move(
    s: SessionRecord,
    to: SessionState,
    { audit, patch, step, via: through = [], fenced = true, money, spend, spendReissued }: MoveOptions,
  ): Promise<SessionRecord> {
    const at = this.deps.now();
    const via = [...startOf(s, to), ...through];
    const transition = this.deps.store.transition({
      id: s.id,
      from: s.state,
      to,
      expectedVersion: s.version,
      current: s,
      audit: { ...audit, at },
      ...(fenced ? { owner: this.deps.owner } : {}),
      ...(via.length > 0 ? { via: via.map((v) => ({ state: v.state, audit: { ...v.audit, at } })) } : {}),
      ...(patch ? { patch } : {}),
      ...(step ? { step } : {}),
      ...(money ? { money } : {}),
    });
    const moved = await (spends(spend)
      ? transition.catch((error: unknown) => this.#spendFailed(s, spend, spendReissued === true, error))
      : transition);
    for (const v of via) this.deps.onTransition?.(v.state);
    this.deps.onTransition?.(to);
    if (step) await this.deps.traces.append(step);
    return moved;
  }

  /**
   * Settles the spend carried for session `id` (see #carried) against the session as the store
   * holds it now: once the store answers again, before the session's run goes on, and when a run
   * ends (its lease lost in the outage). At the version its move started from, the move did not
   * commit: the spend is charged. Past it, the move made the next version if this replica's fenced
   * move did (the write committed, its answer lost: the spend is in the usage); otherwise someone
   * else moved the session (a cancel, an expiry, another replica's run), and the spend is charged.
   * A charge that fails is counted and logged, and so is a read that fails on the `last` settle (the
   * run ends); otherwise a failed read leaves the spend carried, and throws.
   */
  async settle(id: string, { last = false } = {}): Promise<void> {
    const carried = this.#carried.size > 0 ? this.#carried.get(id) : undefined;
    if (!carried) return;
    this.#carried.delete(id);
    let trail: AuditRecord[];
    try {
      trail = await this.deps.store.auditTrail(id, Math.min(...carried.map(({ from }) => from.version)));
    } catch (error) {
      if (!last) {
        this.#carried.set(id, [...carried, ...(this.#carried.get(id) ?? [])]);
        throw error;
      }
      for (const { from, spend } of carried) this.deps.onLateSpend?.(from, spend, "store_failed", error);
      return;
    }
    for (const { from, spend } of carried) {
      if (trail.find((a) => a.version === from.version + 1)?.owner === this.deps.owner) continue;
      const [to, failure] = await this.#charge(from, spend, spend);
      if (!to) this.deps.onLateSpend?.(from, spend, "store_failed", failure);
    }
  }

  /**
   * A move that carried `spend` failed. When the session ended meanwhile, the spend is charged to
   * it (nobody sends a tool call again for an ended session); when it is live under another run,
   * only a model's spend is (a tool call is sent again, `reissued`, and its price paid when it is
   * observed); when the store was out, a model's spend is carried until the session is read again
   * (see settle). The error stands.
   */
  async #spendFailed(s: SessionRecord, spend: Spend, reissued: boolean, error: unknown): Promise<never> {
    if (error instanceof StoreUnavailableError) {
      if (!reissued) this.#carried.set(s.id, [...(this.#carried.get(s.id) ?? []), { from: s, spend }]);
      this.deps.onLateSpend?.(s, spend, reissued ? "reissued" : "carried", error);
    } else if (error instanceof StaleTransitionError) {
      const [to, failure] = await this.#charge(s, spend, reissued ? NO_SPEND : spend);
      const fate: LateSpend = to === undefined ? "store_failed" : to === "live" && reissued ? "reissued" : "charged";
      this.deps.onLateSpend?.(s, spend, fate, failure);
    }
    throw error;
  }

  /**
   * Charges work the host does for its own checks apart from any move (a guard's live read: a tool
   * call, its price and its retries, the attempts past its first) to the session as it is done, in
   * one statement: no new version, and the session's next move keeps it (see SessionStore.charge),
   * whichever replica makes it; a session that ends first (a cancel, an expiry, another replica's
   * stop) has it all the same. A charge the store does not take is reported, never thrown: the read
   * was made, and the session goes on with what it read.
   */
  async charge(s: SessionRecord, spend: Spend): Promise<void> {
    const [to, failure] = await this.#charge(s, spend, spend);
    if (!to) this.deps.onLateSpend?.(s, spend, "store_failed", failure);
  }

  /** Charges `spend` to `s` should it have ended (a tool call a stop cut off: a live session sends it again, and pays then). */
  async chargeIfEnded(s: SessionRecord, spend: Spend): Promise<void> {
    const [to, failure] = await this.#charge(s, spend, NO_SPEND);
    if (to === "ended") this.deps.onLateSpend?.(s, spend, "charged");
    else if (!to) this.deps.onLateSpend?.(s, spend, "store_failed", failure);
  }

  /** Charges `spend` to `s`, or `live` should it be live (see SessionStore.charge): where it went, or why not. */
  #charge(s: SessionRecord, spend: Spend, live: Spend): Promise<readonly ["ended" | "live" | undefined, unknown?]> {
    return this.deps.store.charge(s.id, spend, live).then(
      (to) => [to, to ? undefined : new SessionNotFoundError(s.id)] as const,
      (failure: unknown) => [undefined, failure] as const,
    );
  }

  /** Ends the session with `reason` and its (redacted) answer; nothing stays pending. */
  async stop(s: SessionRecord, reason: StopReason, answer: string, options: StopOptions = {}): Promise<SessionRecord> {
    const clean = redactText(answer);
    const patch = { ...options.patch, stopReason: reason, answer: clean, pending: null };
    // Judged with the pending call still on it: one whose outcome is unknown is told apart.
    const outcome = this.deps.outcomeOf?.({ ...s, ...patch, pending: s.pending, state: terminalStateOf(reason) });
    const done = await this.move(s, terminalStateOf(reason), {
      ...options,
      audit: { reason: `${reason}: ${clean.slice(0, 300)}`, outcome: reason },
      patch: outcome ? { ...patch, context: contextJson({ ...contextOf({ ...s, ...patch }), outcome }) } : patch,
    });
    this.deps.onStopped?.(done);
    return done;
  }
}
