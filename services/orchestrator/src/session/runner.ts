// Drives one session through its state machine. The policy only decides; everything else —
// parsing, validation, authorisation, preconditions, approvals, the tool call, observing,
// budgets and stopping — happens here and in this folder, and every move is a persisted
// transition made by SessionMoves, so a session survives the process that ran it.
import { servedView } from "../guard/personal-data-served.js";
import { LeaseLostError, type SessionRecord, StaleTransitionError } from "../store/session-store.js";
import { approve } from "./approve.js";
import { pendingOf, storedConfidence } from "./data.js";
import { execute } from "./execute.js";
import type { Kit, RunnerDeps } from "./kit.js";
import type { SessionMoves } from "./moves.js";
import { NextCall } from "./next-call.js";
import { observe } from "./observe.js";
import { wake } from "./park.js";
import { isTerminal } from "./session-state.js";
import { SessionSpans } from "./spans.js";
import { stopTakenOver, takenOverTooOften } from "./takeovers.js";
import { think } from "./think.js";

export class SessionRunner {
  readonly #kit: Kit;
  readonly #next: NextCall;
  /** Runs started so far, for each run's mark (see Kit.runs). */
  #started = 0;

  constructor(deps: RunnerDeps, moves: SessionMoves) {
    this.#kit = { deps, moves, spans: new SessionSpans(deps), runs: new Map() };
    this.#next = new NextCall(this.#kit);
  }

  /**
   * Runs the session until it ends, waits for a human, or this replica loses its lease.
   * `current` is the record as the caller just read or created it (saves reading it again).
   * Returns the last record seen.
   */
  async run(id: string, signal: AbortSignal, current?: SessionRecord): Promise<SessionRecord | null> {
    const first = current ?? (await this.#kit.deps.store.get(id));
    const span = this.#kit.spans.open(id, first);
    const mark = `${this.#kit.deps.runId}.${++this.#started}`;
    this.#kit.runs.set(id, mark);
    let last: SessionRecord | null = null;
    try {
      last = await this.#run(id, first, signal);
      if (last)
        span.span.setAttributes({
          "loopguard.state": last.state,
          "loopguard.stop_reason": last.stopReason ?? "",
          ...confidenceAttributes(last),
        });
      return last;
    } finally {
      if (this.#kit.runs.get(id) === mark) this.#kit.runs.delete(id);
      // Tracing never fails a run: a failed session whose steps cannot be read back keeps no trace.
      await this.#kit.spans.close(id, span, last).catch(() => undefined);
    }
  }

  /** A human approved the action the session waits on (see approve.ts). */
  approve(s: SessionRecord, approver: string, why: string): Promise<SessionRecord> {
    return approve(this.#kit, s, approver, why);
  }

  async #run(id: string, first: SessionRecord | null, signal: AbortSignal): Promise<SessionRecord | null> {
    let s = first;
    while (s && !isTerminal(s.state) && !signal.aborted) {
      if (s.state === "AWAITING_APPROVAL") return s;
      // Parked by this run: it waits for its wake; a parked session handed to this run was woken.
      if (s.state === "PARKED" && s !== first) return s;
      try {
        s = await (takenOverTooOften(this.#kit, s) ? stopTakenOver(this.#kit, s) : this.#advance(s, signal));
      } catch (error) {
        if (error instanceof LeaseLostError) return null;
        if (!(error instanceof StaleTransitionError)) throw error;
        s = await this.#kit.deps.store.get(id);
        // Moved on by another replica that took it over (this one's lease ran out): that replica's to drive.
        if (s && drivable(s) && s.leaseOwner !== this.#kit.deps.owner) return null;
      }
    }
    return s;
  }

  #advance(s: SessionRecord, signal: AbortSignal): Promise<SessionRecord> {
    switch (s.state) {
      // A new session's first decision is stored with its start (see SessionMoves.move): one commit, not two.
      case "IDLE":
      case "THINKING": {
        // A decision's calls go out one by one before the policy is asked again.
        const pending = pendingOf(s);
        const next = pending.queue[0];
        return next ? this.#next.take(s, next, pending, signal) : think(this.#kit, s, signal);
      }
      case "TOOL_EXECUTING":
      case "RETRYING":
        return execute(this.#kit, s, signal);
      case "FALLBACK":
        return this.#kit.moves.move(s, "OBSERVING", { audit: { reason: "fallback answer observed" } });
      case "OBSERVING":
        return observe(this.#kit, s);
      case "PARKED":
        return wake(this.#kit, s);
      default:
        throw new Error(`cannot advance a session in ${s.state}`);
    }
  }
}

/** A session a run goes on with: not ended, not waiting for a human or for a tool. */
function drivable(s: SessionRecord): boolean {
  return !isTerminal(s.state) && s.state !== "AWAITING_APPROVAL" && s.state !== "PARKED";
}

/** The answer's confidence on the session's span, so a trace shows how sure the policy was beside how it stopped. */
function confidenceAttributes(s: SessionRecord): Record<string, number | string> {
  const stated = storedConfidence(s);
  if (!stated) return {};
  // The reason is the model's text, stored redacted: the task's own numbers in it are masked too.
  return {
    "loopguard.confidence": stated.value,
    "loopguard.uncertainty_reason": servedView(s.task).stored(stated.reason),
  };
}
