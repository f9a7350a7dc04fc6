// The sessions one replica drives: claimed from the store under a lease while it has free slots
// (on an interval and on the store's change events), each run until it ends, waits or is lost,
// its lease renewed meanwhile; store outages ridden out with backoff; expired approvals swept.
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "@loopguard/tool-sdk";
import type { SessionMetrics } from "../governance/session-metrics.js";
import type { SessionEvents } from "../store/session-events.js";
import { type SessionRecord, StoreUnavailableError } from "../store/session-store.js";
import { expireApprovals, type HumanDeps } from "./human.js";
import type { RunnerDeps } from "./kit.js";
import type { SessionMoves } from "./moves.js";
import { claimable, type DrivenRun, LeaseKeeper, ParkedWaker, Slots, storeBackoffMs, type Take } from "./replica.js";
import type { SessionRunner } from "./runner.js";
import { isTerminal } from "./session-state.js";

export interface DriverOptions extends Pick<RunnerDeps, "store" | "owner" | "registry" | "clients" | "now"> {
  readonly log: Logger;
  readonly leaseTtlMs: number;
  /** Sessions this replica drives at once. */
  readonly maxActiveSessions: number;
  readonly claimIntervalMs: number;
  /** How often this replica ends sessions whose approval expired unanswered. */
  readonly approvalSweepMs: number;
  /** Parked sessions woken per second at most (default 50). */
  readonly wakePerSecond?: number;
  readonly metrics?: Pick<SessionMetrics, "leasesLost">;
}

/** What the driver works with: the runner, the one path that moves a session, a human's operations, the store's events. */
export interface DriverParts {
  readonly runner: SessionRunner;
  readonly moves: SessionMoves;
  readonly human: HumanDeps;
  readonly events: SessionEvents;
}

export class SessionDriver {
  readonly #active = new Map<string, DrivenRun>();
  readonly #leases: LeaseKeeper;
  readonly #waker: ParkedWaker;
  #timer: NodeJS.Timeout | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #sweepTimer: NodeJS.Timeout | undefined;
  #stopListening: (() => void) | undefined;
  #sweeping = false;
  /** Consecutive failed claims and sweeps (store unavailable): claims back off, and each outage is logged once. */
  #claimFailures = 0;
  #claimRetryAt = 0;
  #sweepFailures = 0;
  #stopping = false;
  #ticking = false;
  /** A claim was asked for while one was running: run another right after, not at the next interval. */
  #tickAgain = false;
  /** ORCHESTRATOR_MAX_ACTIVE_SESSIONS, one count for StartSession, claims and wakes. */
  readonly #slots: Slots;
  /** A session was created unleased (no free slot) since the last claim: claim as soon as a slot frees. */
  #waiting = false;
  /** Sessions claimed again while their aborted run still ended (see #drive). */
  readonly #claimedAgain = new Set<string>();

  constructor(
    private readonly options: DriverOptions,
    private readonly parts: DriverParts,
  ) {
    this.#slots = new Slots(options.maxActiveSessions, this.#active);
    this.#leases = new LeaseKeeper(options.store, options.owner, options.leaseTtlMs, this.#active, (lost) =>
      this.#leasesRanOut("stopped", lost.length),
    );
    this.#waker = new ParkedWaker({
      ...options,
      perSecond: options.wakePerSecond ?? 50,
      fill: (most, take) => this.#fill(most, take),
    });
  }

  /** Starts claiming and driving sessions, including every non-terminal one left by a previous run. */
  start(): void {
    this.#timer = setInterval(() => void this.#tick(), this.options.claimIntervalMs);
    this.#renewTimer = setInterval(
      () => void this.#leases.renew(),
      Math.max(100, Math.floor(this.options.leaseTtlMs / 3)),
    );
    this.#sweepTimer = setInterval(() => void this.#sweepApprovals(), this.options.approvalSweepMs);
    this.#waker.start();
    // A session let go elsewhere (created without a free slot, approved, released by a replica
    // that stops) is claimed on its event rather than at the next interval.
    const stopEvents = this.parts.events.listen((event) => {
      if (claimable(event)) this.claimSoon();
    });
    // A cancel made on another replica stops this replica's run of the session (see abort).
    const stopAborts = this.options.store.onAbort((id) => this.#active.get(id)?.controller.abort());
    this.#stopListening = () => {
      stopEvents();
      stopAborts();
    };
    void this.#tick();
  }

  /** Stops driving sessions; their leases are handed back as each run ends, so another replica can take them at once. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#slots.close();
    clearInterval(this.#timer);
    clearInterval(this.#renewTimer);
    clearInterval(this.#sweepTimer);
    this.#waker.stop();
    this.#stopListening?.();
    for (const { controller } of this.#active.values()) controller.abort();
    await this.#slots.drained(this.options.registry);
  }

  activeCount(): number {
    return this.#active.size;
  }

  /** Aborts the session's run here, and announces it to whichever replica drives it (see announceAbort). */
  abort(id: string): void {
    this.#active.get(id)?.controller.abort();
    this.options.store.announceAbort(id).catch(() => undefined);
  }

  /** A session may be claimable now (created unleased, approved): claim as soon as a slot is free. */
  claimSoon(): void {
    this.#waiting = true;
    void this.#tick();
  }

  /**
   * Creates a session through `create`: with a free slot, leased to this replica and driven at once
   * (no claim, no re-read); otherwise unleased, waiting for whichever replica frees a slot first.
   */
  admit(
    create: (leased: boolean) => Promise<{ session: SessionRecord; created: boolean }>,
  ): Promise<{ session: SessionRecord; created: boolean }> {
    return this.#slots.start(create, (result, leased) => {
      if (leased && result.created) this.#drive(result.session);
      else if (result.created) this.#waiting = true;
    });
  }

  /** Drives what a claim or a wake takes into free slots (see Slots.fill); a lease beyond them is let go, to be claimed again. */
  #fill(most: number, take: Take): Promise<("claimed_back" | undefined)[]> {
    return this.#slots.fill(
      most,
      take,
      (session) => this.#drive(session),
      async (session) => {
        await this.options.store.releaseLease(session.id, this.options.owner).catch(() => false);
        this.#waiting = true;
      },
    );
  }

  async #tick(): Promise<void> {
    if (this.#stopping) return;
    if (this.#ticking) {
      this.#tickAgain = true;
      return;
    }
    this.#ticking = true;
    this.#tickAgain = false;
    try {
      const free = this.#slots.free();
      if (free <= 0 || Date.now() < this.#claimRetryAt) return;
      this.#waiting = false;
      const { owner, leaseTtlMs } = this.options;
      const driven = await this.#fill(free, (slots) => this.options.store.claim(owner, leaseTtlMs, slots));
      const claimedBack = driven.filter((d) => d === "claimed_back").length;
      if (this.#claimFailures > 0) this.options.log.info("claiming sessions again", { count: this.#claimFailures });
      this.#claimFailures = 0;
      if (claimedBack > 0) this.#leasesRanOut("claimed_back", claimedBack);
    } catch (error) {
      // Whatever failed, the next claim waits (bounded backoff) instead of retrying every tick.
      this.#claimFailures += 1;
      this.#claimRetryAt = Date.now() + storeBackoffMs(this.#claimFailures);
      this.#waiting = true;
      if (this.#claimFailures === 1) {
        this.options.log.error("claiming sessions failed; backing off until the store answers", {
          error_name: (error as Error).name,
          error_message: (error as Error).message,
        });
      }
    } finally {
      this.#ticking = false;
      if (this.#tickAgain) void this.#tick();
    }
  }

  /** Leases of sessions this replica was running ran out (it stalled past the TTL): counted and logged. */
  #leasesRanOut(then: "stopped" | "claimed_back", count: number): void {
    this.options.metrics?.leasesLost.inc({ then }, count);
    this.options.log.warn(
      then === "stopped"
        ? "session leases lost; their runs stop, and whoever claims the sessions next goes on"
        : "session leases ran out while their runs went on; this replica claimed them back",
      { count },
    );
  }

  /**
   * Runs the session, unless this replica runs it already. A claim only takes leases that are free
   * or ran out, so a claimed session found running had its lease run out: a run that was stopped for
   * it is followed by a fresh claim once it ends; one still going is "claimed_back" and goes on,
   * fenced by the lease it holds again.
   */
  #drive(session: SessionRecord): "claimed_back" | undefined {
    const running = this.#active.get(session.id);
    if (running) {
      if (!running.controller.signal.aborted) return "claimed_back";
      this.#claimedAgain.add(session.id);
      return undefined;
    }
    const controller = new AbortController();
    this.#active.set(session.id, { controller, from: session.version });
    void (async () => {
      try {
        await this.#runUntilSettled(session, controller.signal);
      } catch (error) {
        this.options.log.error("session runner failed", {
          error_name: (error as Error).name,
          error_message: (error as Error).message,
        });
        // Fenced by this replica's lease: a session another replica took over meanwhile is its run's to end.
        const s = await this.options.store.get(session.id).catch(() => null);
        if (s && !isTerminal(s.state)) {
          await this.parts.moves
            .stop(s, "unrecoverable_error", `the orchestrator failed: ${(error as Error).message}`)
            .catch(() => undefined);
        }
      } finally {
        // A run that stops while it waits for the store (its lease lost, the replica stopping) settles what it carried.
        await this.parts.moves.settle(session.id, { last: true });
        // A stopping replica hands the lease back before the run counts as ended, so that stop()
        // waits for it: the next replica takes the session at once, not when the lease runs out.
        if (this.#stopping) await this.options.store.releaseLease(session.id, this.options.owner).catch(() => false);
        this.#active.delete(session.id);
        if (this.#claimedAgain.delete(session.id) && !this.#stopping) {
          // The claim's record is older than what the ended run wrote: let the lease go and claim it afresh.
          await this.options.store.releaseLease(session.id, this.options.owner).catch(() => false);
          this.#waiting = true;
        }
        if (!this.#stopping && this.#waiting) void this.#tick();
      }
    })();
    return undefined;
  }

  /** Runs the session until it ends, waits for a human or a tool, or is no longer ours. */
  async #runUntilSettled(session: SessionRecord, signal: AbortSignal): Promise<void> {
    // The record as claimed or created serves the first run; later runs read it again.
    let current: SessionRecord | undefined = session;
    let outage = 0;
    while (!signal.aborted) {
      try {
        // After an outage: a spend its write could not carry is charged before the session goes on.
        if (outage > 0) await this.parts.moves.settle(session.id);
        const last = await this.parts.runner.run(session.id, signal, current);
        // Ended, waiting for a human (lease released by that move), or no longer ours.
        if (!last || isTerminal(last.state) || last.state === "AWAITING_APPROVAL" || last.state === "PARKED") return;
      } catch (error) {
        // A store outage pauses the session, never fails it: it resumes from what the store
        // holds once it answers (the lease, renewed meanwhile, keeps it ours).
        if (!(error instanceof StoreUnavailableError)) throw error;
        outage += 1;
        const waitMs = storeBackoffMs(outage);
        if (outage === 1)
          this.options.log.warn("session store unavailable; the session waits for it", {
            session_id: session.id,
            error_message: error.message,
            retry_in_ms: waitMs,
          });
        await sleep(waitMs, undefined, { signal }).catch(() => undefined);
      }
      current = undefined;
    }
  }

  /** Ends the sessions whose approval expired unanswered (see expireApprovals); failures are logged once per outage. */
  async #sweepApprovals(): Promise<void> {
    if (this.#sweeping || this.#stopping) return;
    this.#sweeping = true;
    try {
      await expireApprovals(this.parts.human, this.options.store);
      if (this.#sweepFailures > 0) this.options.log.info("approval sweep runs again", { count: this.#sweepFailures });
      this.#sweepFailures = 0;
    } catch (error) {
      this.#sweepFailures += 1;
      if (this.#sweepFailures === 1)
        this.options.log.error("approval sweep failed; the next sweep tries again", {
          error_name: (error as Error).name,
          error_message: (error as Error).message,
        });
    } finally {
      this.#sweeping = false;
    }
  }
}
