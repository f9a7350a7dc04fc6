// The one path that moves a session: every change of state — the runner's, a human's cancel,
// approval or deny, an expiry, a crash re-issue — is a persisted transition (state + version,
// with its audit rows) made here, and counted here (transitions, stops) and traced here (steps).
import type { MoneyChange } from "../store/effect-reservations.js";
import { withSpend } from "../guard/budget.js";
import { redactText } from "../guard/redact.js";
import type { SessionState, StopReason } from "./session-state.js";
import {
  type AuditInput,
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
   * call's price): should the session have ended meanwhile (a cancel, another replica's stop), the
   * move fails, and this is charged to the ended session instead.
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
 * met a store outage, carried to the session's next move (see SessionMoves.move); or, a tool's price
 * while the session is live, left to the call that the session sends again and pays for when it
 * observes it.
 */
export type LateSpend = "charged" | "store_failed" | "carried" | "reissued";

const NO_SPEND: Spend = { tokens: 0, costMicros: 0 };

/** Whether `spend` is something to charge: any tokens or money at all. */
function spends(spend: Spend | undefined): spend is Spend {
  return spend !== undefined && (spend.tokens > 0 || spend.costMicros > 0);
}

/** Sessions whose spend one process carries at most; past it the oldest carry is let go (a bound, not a case). */
const MAX_CARRIED = 10_000;

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
   * Spend whose move met a store outage, by session, with the version the move started from. The
   * session waits for the store and goes on from what it holds; if that is still this version, the
   * move did not commit, and the session's next move from it charges the spend as well. Any other
   * version means the move committed (the spend is in the usage) or someone else moved the session.
   */
  readonly #carried = new Map<string, { readonly version: number; readonly spend: Spend }>();

  constructor(private readonly deps: MoveDeps) {}

  /**
   * One persisted transition: through the `via` states, to `to`. From IDLE the session passes
   * THINKING first: its first decision is made before the start is stored, and both commit together.
   */
  async move(
    s: SessionRecord,
    to: SessionState,
    { audit, patch: given, step, via: through = [], fenced = true, money, spend: paid, spendReissued }: MoveOptions,
  ): Promise<SessionRecord> {
    const carried = this.#takeCarried(s);
    const spend = carried && paid ? withSpend(paid, carried) : (carried ?? paid);
    const patch = carried ? { ...given, usage: withSpend(given?.usage ?? s.usage, carried) } : given;
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
      ? transition.catch((error: unknown) => this.#spendFailed(s, spend, spendReissued ? carried : spend, error))
      : transition);
    for (const v of via) this.deps.onTransition?.(v.state);
    this.deps.onTransition?.(to);
    if (step) await this.deps.traces.append(step);
    return moved;
  }

  /** The spend carried for `s` from a move that met a store outage, if it still applies (see #carried); taken once. */
  #takeCarried(s: SessionRecord): Spend | undefined {
    const carried = this.#carried.size > 0 ? this.#carried.get(s.id) : undefined;
    if (!carried) return undefined;
    this.#carried.delete(s.id);
    return carried.version === s.version ? carried.spend : undefined;
  }

  /**
   * A move that carried `spend` failed; `kept` is the part of it that no re-issued call pays for
   * again (all of it, unless the move observed a tool call: then only a carried model spend). When
   * the session ended meanwhile, all of it is charged to the session (nobody sends the call again);
   * when the session is live under another run, `kept` is; when the store was out, `kept` is carried
   * to the session's next move. The error stands.
   */
  async #spendFailed(s: SessionRecord, spend: Spend, kept: Spend | undefined, error: unknown): Promise<never> {
    const keeps = spends(kept);
    if (error instanceof StoreUnavailableError) {
      if (keeps) {
        if (this.#carried.size >= MAX_CARRIED) this.#carried.delete(this.#carried.keys().next().value!);
        this.#carried.set(s.id, { version: s.version, spend: kept });
      }
      this.deps.onLateSpend?.(s, keeps ? kept : spend, keeps ? "carried" : "reissued", error);
    } else if (error instanceof StaleTransitionError) {
      const [to, failure] = await this.deps.store.charge(s.id, spend, keeps ? kept : NO_SPEND).then(
        (to) => [to, to ? undefined : new SessionNotFoundError(s.id)] as const,
        (failure: unknown) => [undefined, failure] as const,
      );
      const fate: LateSpend = to === undefined ? "store_failed" : to === "live" && !keeps ? "reissued" : "charged";
      this.deps.onLateSpend?.(s, to === "live" && keeps ? kept : spend, fate, failure);
    }
    throw error;
  }

  /** Ends the session with `reason` and its (redacted) answer; nothing stays pending. */
  async stop(s: SessionRecord, reason: StopReason, answer: string, options: StopOptions = {}): Promise<SessionRecord> {
    const clean = redactText(answer);
    const patch = { ...options.patch, stopReason: reason, answer: clean, pending: null };
    const outcome = this.deps.outcomeOf?.({ ...s, ...patch, state: terminalStateOf(reason) });
    const done = await this.move(s, terminalStateOf(reason), {
      ...options,
      audit: { reason: `${reason}: ${clean.slice(0, 300)}`, outcome: reason },
      patch: outcome ? { ...patch, context: contextJson({ ...contextOf({ ...s, ...patch }), outcome }) } : patch,
    });
    this.deps.onStopped?.(done);
    return done;
  }
}
