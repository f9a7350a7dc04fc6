// The orchestrator of one replica: serves the API operations on sessions, and drives sessions
// with a SessionDriver (claims under a lease, renewals, outages, the approval sweep). Several
// replicas can share one PostgreSQL store; a replica that dies loses its leases and another
// takes its sessions over. A session waiting for a human holds neither a slot nor a lease: an
// approval makes it claimable again, and a periodic sweep (any replica's) ends expired ones. A
// session parked for a tool holds neither: one query per tick wakes those due, at a bounded rate.
// Watchers, cancels and claims wake on the store's change events, not by polling it.
import { OrchestratorError } from "../api/orchestrator-error.js";
import {
  accessTo,
  actionable,
  readable,
  readerOf,
  sessionNotFound,
  type Viewer,
  whileWaiting,
} from "../api/session-access.js";
import type { StartInput } from "../api/start-request.js";
import type { SessionMetrics } from "../governance/session-metrics.js";
import { budgetOf } from "../guard/budget.js";
import { servedView } from "../guard/personal-data-served.js";
import { redactText } from "../guard/redact.js";
import { SessionEvents } from "../store/session-events.js";
import type { SessionRecord, SessionStore } from "../store/session-store.js";
import { type DriverOptions, SessionDriver } from "./driver.js";
import { sessionHooks } from "./hooks.js";
import { type ApprovalAnswer, answerApproval, cancelSession, type HumanDeps } from "./human.js";
import { newSessionId } from "./ids.js";
import type { RunnerDeps } from "./kit.js";
import { SessionMoves } from "./moves.js";
import { outcomeOf } from "./outcome.js";
import { SessionRunner } from "./runner.js";
import type { SessionState } from "./session-state.js";
import { type WatchEvent, watchSession } from "./watch.js";

export { OrchestratorError } from "../api/orchestrator-error.js";
export type { StartInput } from "../api/start-request.js";

export interface OrchestratorOptions
  extends Omit<RunnerDeps, "onStep" | "onContext" | "onModelCall" | "onUsageDisbelieved">,
    DriverOptions {
  readonly metrics?: SessionMetrics;
  /** Sessions one creator may have in flight, on every replica together (see NewSession.maxInFlight). */
  readonly maxSessionsPerCaller: number;
  /** A follower of a session not woken for this long is woken by the shared backstop (default 30 s). */
  readonly eventBackstopMs?: number;
}

export class Orchestrator {
  readonly #runner: SessionRunner;
  readonly #human: HumanDeps;
  readonly #events: SessionEvents;
  readonly #driver: SessionDriver;

  constructor(private readonly options: OrchestratorOptions) {
    const hooks = sessionHooks(options.log, options.metrics);
    // The one path that moves a session: the runner's moves and a human's alike.
    const moves = new SessionMoves({
      ...options,
      ...hooks,
      outcomeOf: (ended) => outcomeOf(ended, options.rules, options.approvals.minConfidence),
    });
    this.#runner = new SessionRunner({ ...options, ...hooks }, moves);
    this.#human = {
      registry: options.registry,
      moves,
      now: options.now,
      get: (id) => this.get(id),
      abort: (id) => this.#driver.abort(id),
    };
    this.#events = new SessionEvents(options.store, { periodMs: options.eventBackstopMs });
    this.#driver = new SessionDriver(options, {
      runner: this.#runner,
      moves,
      human: this.#human,
      events: this.#events,
    });
  }

  get store(): SessionStore {
    return this.options.store;
  }

  /** Starts claiming and driving sessions, including every non-terminal one left by a previous run. */
  start(): void {
    this.#driver.start();
  }

  /** Stops driving sessions and hands their leases back so another replica can take them at once. */
  async stop(): Promise<void> {
    await this.#driver.stop();
    this.#events.close();
    await this.options.traces.close();
  }

  activeCount(): number {
    return this.#driver.activeCount();
  }

  async startSession(input: StartInput): Promise<{ session: SessionRecord; created: boolean }> {
    if (!this.options.policies.has(input.policy)) {
      throw new OrchestratorError(
        "UNKNOWN_POLICY",
        `policy "${input.policy}" is not configured; choose one of ${[...this.options.policies.keys()].join(", ")}`,
      );
    }
    return this.#driver.admit((leased) =>
      this.options.store.create({
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
        ...(leased ? { lease: { owner: this.options.owner, ttlMs: this.options.leaseTtlMs } } : {}),
        ...(input.signal ? { signal: input.signal } : {}),
      }),
    );
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
      this.#driver.claimSoon();
      return approved;
    });
  }

  /**
   * The session `viewer` may read and what `load` reads of it. A reader who sees it only while it
   * waits for an approval may not see what it did after: one that moved on while `load` ran is
   * SESSION_NOT_FOUND. (Records are only ever added, so one still waiting shows nothing newer.)
   */
  async readAlong<T>(id: string, viewer: Viewer, load: (s: SessionRecord) => Promise<T>): Promise<[SessionRecord, T]> {
    const s = await this.read(id, viewer);
    const loaded = await load(s);
    if (accessTo(viewer, s) === "read") await this.read(id, viewer);
    return [s, loaded];
  }

  /** The session's step records as served (servedView): records written before their writer masked the task's own numbers are masked here. */
  async trace(id: string, viewer: Viewer): Promise<string[]> {
    const [, records] = await this.readAlong(id, viewer, (s) => this.options.traces.read(id, servedView(s.task)));
    return records;
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
