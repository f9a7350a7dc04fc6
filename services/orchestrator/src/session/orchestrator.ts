// The orchestrator of one replica: claims sessions from the store under a lease, drives each
// with a SessionRunner, renews leases while it works, and serves the API operations. Several
// replicas can share one PostgreSQL store; a replica that dies loses its leases and another
// takes its sessions over. A session waiting for a human holds neither a slot nor a lease: an
// approval makes it claimable again, and a periodic sweep (any replica's) ends expired ones. A
// session parked for a tool holds neither: one query per tick wakes those due, at a bounded rate.
// Watchers, cancels and claims wake on the store's change events, not by polling it.
import { setTimeout as sleep } from "node:timers/promises";
import { Effect, type Logger } from "@loopguard/tool-sdk";
import { budgetOf } from "../guard/budget.js";
import { OrchestratorError } from "../api/orchestrator-error.js";
import { redactText } from "../guard/redact.js";
import { sessionHooks } from "./hooks.js";
import { type ApprovalAnswer, answerApproval, cancelSession, expireApprovals, type HumanDeps } from "./human.js";
import { newSessionId } from "./ids.js";
import type { RunnerDeps } from "./kit.js";
import { SessionMoves } from "./moves.js";
import { outcomeOf } from "./outcome.js";
import { claimable, LeaseKeeper, ParkedWaker, storeBackoffMs } from "./replica.js";
import { SessionRunner } from "./runner.js";
import { type WatchEvent, watchSession } from "./watch.js";
import type { StartInput } from "../api/start-request.js";
import {
  accessTo,
  actionable,
  readable,
  readerOf,
  sessionNotFound,
  type Viewer,
  whileWaiting,
} from "../api/session-access.js";
import { SessionEvents } from "../store/session-events.js";
import type { SessionMetrics } from "../governance/session-metrics.js";
import { isTerminal, type SessionState } from "./session-state.js";
import { type SessionRecord, type SessionStore, StoreUnavailableError } from "../store/session-store.js";

export { OrchestratorError } from "../api/orchestrator-error.js";
export type { StartInput } from "../api/start-request.js";

export interface OrchestratorOptions extends Omit<RunnerDeps, "onStep" | "onContext" | "onModelCall"> {
  readonly log: Logger;
  readonly metrics?: SessionMetrics;
  readonly leaseTtlMs: number;
  /** Sessions this replica drives at once. */
  readonly maxActiveSessions: number;
  /** Sessions one creator may have in flight, on every replica together (see NewSession.maxInFlight). */
  readonly maxSessionsPerCaller: number;
  readonly claimIntervalMs: number;
  /** How often this replica ends sessions whose approval expired unanswered. */
  readonly approvalSweepMs: number;
  /** A follower of a session reads it again after this long without an event (default 5 s). */
  readonly eventBackstopMs?: number;
  /** Parked sessions woken per second at most (default 50). */
  readonly wakePerSecond?: number;
}

export class Orchestrator {
  readonly #runner: SessionRunner;
  /** The one path that moves a session: the runner's moves and a human's alike. */
  readonly #moves: SessionMoves;
  readonly #human: HumanDeps;
  readonly #active = new Map<string, AbortController>();
  readonly #events: SessionEvents;
  readonly #leases: LeaseKeeper;
  #timer: NodeJS.Timeout | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
  #sweepTimer: NodeJS.Timeout | undefined;
  readonly #waker: ParkedWaker;
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
  /** Sessions being created leased to this replica, holding a slot until they are driven. */
  #starting = 0;
  /** A session was created unleased (no free slot) since the last claim: claim as soon as a slot frees. */
  #waiting = false;

  constructor(private readonly options: OrchestratorOptions) {
    const hooks = sessionHooks(options.log, options.metrics);
    this.#moves = new SessionMoves({
      ...options,
      ...hooks,
      outcomeOf: (ended) => outcomeOf(ended, options.rules, options.approvals.minConfidence),
    });
    this.#runner = new SessionRunner({ ...options, ...hooks }, this.#moves);
    this.#human = {
      registry: options.registry,
      moves: this.#moves,
      now: options.now,
      get: (id) => this.get(id),
      abort: (id) => this.#active.get(id)?.abort(),
    };
    this.#events = new SessionEvents(options.store, options.eventBackstopMs);
    this.#leases = new LeaseKeeper(options.store, options.owner, options.leaseTtlMs, this.#active);
    this.#waker = new ParkedWaker({
      ...options,
      perSecond: options.wakePerSecond ?? 50,
      free: () => (this.#stopping ? 0 : options.maxActiveSessions - this.#active.size - this.#starting),
      drive: (session) => this.#drive(session),
    });
  }

  get store(): SessionStore {
    return this.options.store;
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
    this.#stopListening = this.#events.listen((event) => {
      if (!claimable(event)) return;
      this.#waiting = true;
      void this.#tick();
    });
    void this.#tick();
  }

  /** Stops driving sessions and hands their leases back so another replica can take them at once. */
  async stop(): Promise<void> {
    this.#stopping = true;
    clearInterval(this.#timer);
    clearInterval(this.#renewTimer);
    clearInterval(this.#sweepTimer);
    this.#waker.stop();
    this.#stopListening?.();
    for (const controller of this.#active.values()) controller.abort();
    // Irreversible calls in flight are not cut off by the abort: wait for them to finish and be
    // recorded, up to the longest such call's SLA timeout.
    const longestIrreversible = Math.max(
      0,
      ...this.options.registry
        .list()
        .filter((t) => t.effect === Effect.IRREVERSIBLE_EXTERNAL)
        .map((t) => t.timeoutMs),
    );
    const deadline = Date.now() + Math.max(5000, longestIrreversible + 1000);
    while (this.#active.size > 0 && Date.now() < deadline) await sleep(20);
    this.#events.close();
    await this.options.traces.close();
  }

  activeCount(): number {
    return this.#active.size;
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
      const free = this.options.maxActiveSessions - this.#active.size - this.#starting;
      if (free <= 0 || Date.now() < this.#claimRetryAt) return;
      this.#waiting = false;
      const claimed = await this.options.store.claim(this.options.owner, this.options.leaseTtlMs, free);
      if (this.#claimFailures > 0) this.options.log.info("claiming sessions again", { count: this.#claimFailures });
      this.#claimFailures = 0;
      for (const session of claimed) this.#drive(session);
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

  #drive(session: SessionRecord): void {
    if (this.#active.has(session.id)) return;
    const controller = new AbortController();
    this.#active.set(session.id, controller);
    void (async () => {
      try {
        // The record as claimed or created serves the first run; later runs read it again.
        let current: SessionRecord | undefined = session;
        let outage = 0;
        while (!controller.signal.aborted) {
          try {
            const last = await this.#runner.run(session.id, controller.signal, current);
            // Ended, waiting for a human (lease released by that move), or no longer ours.
            if (!last || isTerminal(last.state) || last.state === "AWAITING_APPROVAL" || last.state === "PARKED") break;
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
            await sleep(waitMs, undefined, { signal: controller.signal }).catch(() => undefined);
          }
          current = undefined;
        }
      } catch (error) {
        this.options.log.error("session runner failed", {
          error_name: (error as Error).name,
          error_message: (error as Error).message,
        });
        const s = await this.options.store.get(session.id).catch(() => null);
        if (s && !isTerminal(s.state)) {
          await this.#moves
            .stop(s, "unrecoverable_error", `the orchestrator failed: ${(error as Error).message}`, { fenced: false })
            .catch(() => undefined);
        }
      } finally {
        this.#active.delete(session.id);
        if (!this.#stopping && this.#waiting) void this.#tick();
        if (this.#stopping) await this.options.store.releaseLease(session.id, this.options.owner).catch(() => false);
      }
    })();
  }

  /** Ends the sessions whose approval expired unanswered (see expireApprovals); failures are logged once per outage. */
  async #sweepApprovals(): Promise<void> {
    if (this.#sweeping || this.#stopping) return;
    this.#sweeping = true;
    try {
      await expireApprovals(this.#human, this.options.store);
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

  async startSession(input: StartInput): Promise<{ session: SessionRecord; created: boolean }> {
    if (!this.options.policies.has(input.policy)) {
      throw new OrchestratorError(
        "UNKNOWN_POLICY",
        `policy "${input.policy}" is not configured; choose one of ${[...this.options.policies.keys()].join(", ")}`,
      );
    }
    // With a free slot, the session is created leased to this replica and driven at once: no
    // claim, no re-read. Otherwise it waits, unleased, for whichever replica frees a slot first.
    const drive = !this.#stopping && this.#active.size + this.#starting < this.options.maxActiveSessions;
    if (drive) this.#starting += 1;
    try {
      const result = await this.options.store.create({
        id: newSessionId(this.options.now()),
        goal: input.goal,
        task: input.task,
        budget: budgetOf(input.budget),
        scopes: [...input.scopes],
        policy: input.policy,
        createdBy: input.createdBy,
        requestHash: input.requestHash,
        maxInFlight: this.options.maxSessionsPerCaller,
        ...(input.idempotencyKey ? { idempotencyKey: input.idempotencyKey } : {}),
        ...(drive ? { lease: { owner: this.options.owner, ttlMs: this.options.leaseTtlMs } } : {}),
      });
      if (drive && result.created) this.#drive(result.session);
      else if (result.created) this.#waiting = true;
      return result;
    } finally {
      if (drive) this.#starting -= 1;
    }
  }

  async get(id: string): Promise<SessionRecord> {
    const s = await this.options.store.get(id);
    if (!s) throw sessionNotFound(id);
    return s;
  }

  /** The session, if `viewer` may read it (see session-access.ts); else SESSION_NOT_FOUND, as for an unknown id. */
  async read(id: string, viewer: Viewer): Promise<SessionRecord> {
    return readable(viewer, await this.get(id));
  }

  /** Cancels a session `viewer` may act on (see cancelSession: an irreversible call in flight is waited for, never cut off). */
  async cancel(id: string, cancelReason: string, viewer: Viewer): Promise<SessionRecord> {
    actionable(viewer, await this.get(id));
    // Followed from before the first read: the outcome of a call in flight wakes the wait.
    const changes = this.#events.follow(id);
    try {
      return await cancelSession(this.#human, id, redactText(cancelReason), viewer.subject, changes);
    } finally {
      changes.close();
    }
  }

  /** A human's answer to the approval a session waits on; the approver is the caller's authenticated subject. */
  async resolveApproval(input: ApprovalAnswer): Promise<SessionRecord> {
    return answerApproval(this.#human, input, async (s, approver, by) => {
      const approved = await this.#runner.approve(s, approver, by);
      // Unleased since it began to wait: this replica claims it now if it has a free slot.
      this.#waiting = true;
      void this.#tick();
      return approved;
    });
  }

  async trace(id: string, viewer: Viewer): Promise<string[]> {
    await this.read(id, viewer);
    return this.options.traces.read(id);
  }

  /**
   * The session now, then every transition and step as it is persisted, until it ends (see
   * watchSession); a reader who sees it only while it waits for an approval sees it leave, no further.
   */
  async *watch(id: string, signal: AbortSignal, viewer: Viewer): AsyncGenerator<WatchEvent> {
    const changes = this.#events.follow(id);
    try {
      const s = await this.read(id, viewer);
      const events = watchSession(this.options.store, s, changes, signal);
      yield* accessTo(viewer, s) === "read" ? whileWaiting(events, s) : events;
    } finally {
      changes.close();
    }
  }

  /** The sessions `viewer` may read, filtered by the store's query (pages stay full). */
  async list(state: SessionState | undefined, limit: number, after: string | undefined, viewer: Viewer) {
    const visibleTo = readerOf(viewer);
    return this.options.store.list({
      ...(state ? { state } : {}),
      limit,
      ...(after ? { after } : {}),
      ...(visibleTo ? { visibleTo } : {}),
    });
  }
}
