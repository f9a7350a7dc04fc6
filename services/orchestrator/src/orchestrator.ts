// The orchestrator of one replica: claims sessions from the store under a lease, drives each
// with a SessionRunner, renews leases while it works, and serves the API operations. Several
// replicas can share one PostgreSQL store; a replica that dies loses its leases and another
// takes its sessions over. A session waiting for a human holds neither a slot nor a lease: an
// approval makes it claimable again, and a periodic sweep (any replica's) ends expired ones.
// Watchers, cancels and claims wake on the store's change events, not by polling it.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Effect, type Logger } from "@loopguard/tool-sdk";
import { DEFAULT_BUDGET } from "./budget.js";
import type { PendingApproval } from "./approvals.js";
import { SessionEvents, type SessionFollower } from "./session-events.js";
import { isTerminal, type SessionState } from "./session-state.js";
import {
  type AuditRecord,
  type BudgetLimits,
  type JsonObject,
  type SessionEvent,
  type SessionRecord,
  type SessionStore,
  StaleTransitionError,
  type StepRecord,
  StoreUnavailableError,
} from "./session-store.js";
import type { SessionMetrics } from "./session-metrics.js";
import { redactText } from "./redact.js";
import { type RunnerDeps, SessionRunner, sideEffectsOf } from "./session-runner.js";
import type { RegisteredTool } from "./tool-registry.js";

export interface OrchestratorOptions extends Omit<RunnerDeps, "onStopped" | "onStep" | "onContextAlarm" | "onTransition"> {
  readonly log: Logger;
  readonly metrics?: SessionMetrics;
  readonly leaseTtlMs: number;
  /** Sessions this replica drives at once. */
  readonly maxActiveSessions: number;
  readonly claimIntervalMs: number;
  /** How often this replica ends sessions whose approval expired unanswered. */
  readonly approvalSweepMs: number;
  /** A follower of a session reads it again after this long without an event (default 5 s). */
  readonly eventBackstopMs?: number;
}

export interface StartInput {
  readonly goal: string;
  readonly task: JsonObject;
  readonly budget: Partial<BudgetLimits>;
  readonly scopes: readonly string[];
  readonly policy: string;
  readonly idempotencyKey?: string;
  /** The caller's authenticated subject. */
  readonly createdBy: string;
  /** Hash of the canonical request, compared when the idempotency key matches an earlier start. */
  readonly requestHash: string;
}

export class OrchestratorError extends Error {
  constructor(
    readonly reason: "SESSION_NOT_FOUND" | "SESSION_TERMINAL" | "APPROVAL_MISMATCH" | "APPROVAL_EXPIRED" | "UNKNOWN_POLICY" | "SELF_APPROVAL" | "CALL_IN_FLIGHT",
    message: string,
  ) {
    super(message);
  }
}

export type WatchEvent =
  | { readonly kind: "snapshot"; readonly session: SessionRecord }
  | { readonly kind: "transition"; readonly audit: AuditRecord }
  | { readonly kind: "step"; readonly step: StepRecord };

const ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";
/** Most expired approvals one sweep ends; the next sweep takes the rest. */
const SWEEP_BATCH = 100;
const SWEEP_PAGES = 10;

/** Wait before the `attempt`-th retry after a store outage: doubling from 100 ms up to 5 s, with jitter, so replicas do not retry in step. */
function storeBackoffMs(attempt: number): number {
  const ceiling = Math.min(5000, 100 * 2 ** Math.min(attempt - 1, 6));
  return Math.round(ceiling * (0.5 + Math.random() / 2));
}

/** Whether an event says a session may be claimed now: live, not waiting for a human, and leased to nobody. */
function claimable(event: SessionEvent): boolean {
  return event.kind === "resync" || (event.leaseOwner === null && !isTerminal(event.state) && event.state !== "AWAITING_APPROVAL");
}

/**
 * `ses_` + 9 characters of creation time (milliseconds, base 36) + 11 random ones: ids of
 * sessions created together sort together, so the store's indexes keyed by session id (sessions,
 * audit rows, steps) touch a few recent pages per commit instead of one random page per session.
 */
function newSessionId(now: number): string {
  const time = now.toString(36).padStart(9, "0");
  // randomUUID, not randomBytes: it draws on a cached entropy pool (docs/performance.md, "Random
  // ids"). The UUID's version digit (12) and variant digit (16) are fixed, so they are left out.
  const hex = randomUUID().replaceAll("-", "");
  const random = hex.slice(0, 12) + hex.slice(13, 16) + hex.slice(17);
  let id = `ses_${time}`;
  for (let i = 0; i < 22; i += 2) id += ID_ALPHABET[Number.parseInt(random.slice(i, i + 2), 16) % ID_ALPHABET.length];
  return id;
}

export class Orchestrator {
  readonly #runner: SessionRunner;
  readonly #active = new Map<string, AbortController>();
  readonly #events: SessionEvents;
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
  /** Sessions being created leased to this replica, holding a slot until they are driven. */
  #starting = 0;
  /** A session was created unleased (no free slot) since the last claim: claim as soon as a slot frees. */
  #waiting = false;

  constructor(private readonly options: OrchestratorOptions) {
    this.#runner = new SessionRunner({
      ...options,
      onStopped: (s) => {
        options.metrics?.stops.inc({ stop_reason: s.stopReason ?? "unknown" });
        options.metrics?.stepsPerSession.observe(s.usage.steps);
        options.log.info("session ended", { session_id: s.id, state: s.state, reason: s.stopReason ?? "", count: s.usage.steps, trace_id: String(s.context.traceId ?? "") });
      },
      onTransition: (to) => options.metrics?.transitions.inc({ to }),
      onContextAlarm: (s, tokens) => {
        options.metrics?.contextAlarms.inc();
        options.log.warn("session context at 80% of the model window", { session_id: s.id, count: tokens, trace_id: String(s.context.traceId ?? "") });
      },
      onStep: (_s, tool, envelope) => {
        options.metrics?.toolResults.inc({ tool, outcome: envelope.ok ? "ok" : (envelope.error?.code ?? "error"), served_from: envelope.servedFrom });
        options.metrics?.costMicros.inc(envelope.costMicros);
      },
    });
    this.#events = new SessionEvents(options.store, options.eventBackstopMs);
  }

  get store(): SessionStore {
    return this.options.store;
  }

  /** Starts claiming and driving sessions, including every non-terminal one left by a previous run. */
  start(): void {
    this.#timer = setInterval(() => void this.#tick(), this.options.claimIntervalMs);
    this.#renewTimer = setInterval(() => void this.#renew(), Math.max(100, Math.floor(this.options.leaseTtlMs / 3)));
    this.#sweepTimer = setInterval(() => void this.#sweepApprovals(), this.options.approvalSweepMs);
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
    this.#stopListening?.();
    for (const controller of this.#active.values()) controller.abort();
    // Irreversible calls in flight are not cut off by the abort: wait for them to finish and be
    // recorded, up to the longest such call's SLA timeout.
    const longestIrreversible = Math.max(0, ...this.options.registry.list().filter((t) => t.effect === Effect.IRREVERSIBLE_EXTERNAL).map((t) => t.timeoutMs));
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
        this.options.log.error("claiming sessions failed; backing off until the store answers", { error_name: (error as Error).name, error_message: (error as Error).message });
      }
    } finally {
      this.#ticking = false;
      if (this.#tickAgain) void this.#tick();
    }
  }

  async #renew(): Promise<void> {
    for (const [id, controller] of this.#active) {
      // A store that cannot answer says nothing about the lease: the session keeps it until the
      // store says otherwise, and its transitions stay fenced by the lease meanwhile.
      const held = await this.options.store.renewLease(id, this.options.owner, this.options.leaseTtlMs).catch((error: unknown) => error instanceof StoreUnavailableError);
      if (!held) controller.abort();
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
            if (!last || isTerminal(last.state) || last.state === "AWAITING_APPROVAL") break;
          } catch (error) {
            // A store outage pauses the session, never fails it: it resumes from what the store
            // holds once it answers (the lease, renewed meanwhile, keeps it ours).
            if (!(error instanceof StoreUnavailableError)) throw error;
            outage += 1;
            const waitMs = storeBackoffMs(outage);
            if (outage === 1) this.options.log.warn("session store unavailable; the session waits for it", { session_id: session.id, error_message: error.message, retry_in_ms: waitMs });
            await sleep(waitMs, undefined, { signal: controller.signal }).catch(() => undefined);
          }
          current = undefined;
        }
      } catch (error) {
        this.options.log.error("session runner failed", { error_name: (error as Error).name, error_message: (error as Error).message });
        const s = await this.options.store.get(session.id).catch(() => null);
        if (s && !isTerminal(s.state)) {
          await this.#runner.stop(s, "unrecoverable_error", `the orchestrator failed: ${(error as Error).message}`).catch(() => undefined);
        }
      } finally {
        this.#active.delete(session.id);
        if (!this.#stopping && this.#waiting) void this.#tick();
        if (this.#stopping) await this.options.store.releaseLease(session.id, this.options.owner).catch(() => false);
      }
    })();
  }

  /**
   * Ends the sessions whose approval expired unanswered. Every replica sweeps; the optimistic
   * lock lets exactly one of them (or a human's answer racing it) move each session.
   */
  async #sweepApprovals(): Promise<void> {
    if (this.#sweeping || this.#stopping) return;
    this.#sweeping = true;
    try {
      for (let page = 0; page < SWEEP_PAGES; page += 1) {
        const expired = await this.options.store.expiredApprovals(this.options.now(), SWEEP_BATCH);
        for (const s of expired) {
          const approval = (s.pending as { approval?: PendingApproval } | null)?.approval;
          await this.#runner
            .stop(s, "approval_denied", `approval ${approval?.approvalId ?? ""} expired unanswered`, {}, undefined, [], false)
            .catch((error: unknown) => {
              if (!(error instanceof StaleTransitionError)) throw error;
            });
        }
        if (expired.length < SWEEP_BATCH) break;
      }
      if (this.#sweepFailures > 0) this.options.log.info("approval sweep runs again", { count: this.#sweepFailures });
      this.#sweepFailures = 0;
    } catch (error) {
      this.#sweepFailures += 1;
      if (this.#sweepFailures === 1) this.options.log.error("approval sweep failed; the next sweep tries again", { error_name: (error as Error).name, error_message: (error as Error).message });
    } finally {
      this.#sweeping = false;
    }
  }

  async startSession(input: StartInput): Promise<{ session: SessionRecord; created: boolean }> {
    if (!this.options.policies.has(input.policy)) {
      throw new OrchestratorError("UNKNOWN_POLICY", `policy "${input.policy}" is not configured; choose one of ${[...this.options.policies.keys()].join(", ")}`);
    }
    const budget: BudgetLimits = {
      maxSteps: input.budget.maxSteps || DEFAULT_BUDGET.maxSteps,
      maxToolCalls: input.budget.maxToolCalls || DEFAULT_BUDGET.maxToolCalls,
      maxTokens: input.budget.maxTokens || DEFAULT_BUDGET.maxTokens,
      maxCostMicros: input.budget.maxCostMicros || DEFAULT_BUDGET.maxCostMicros,
      deadlineMs: input.budget.deadlineMs || DEFAULT_BUDGET.deadlineMs,
    };
    // With a free slot, the session is created leased to this replica and driven at once: no
    // claim, no re-read. Otherwise it waits, unleased, for whichever replica frees a slot first.
    const drive = !this.#stopping && this.#active.size + this.#starting < this.options.maxActiveSessions;
    if (drive) this.#starting += 1;
    try {
      const result = await this.options.store.create({
        id: newSessionId(this.options.now()),
        goal: input.goal,
        task: input.task,
        budget,
        scopes: [...input.scopes],
        policy: input.policy,
        createdBy: input.createdBy,
        requestHash: input.requestHash,
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
    if (!s) throw new OrchestratorError("SESSION_NOT_FOUND", `no session ${id}`);
    return s;
  }

  /**
   * Cancels a session. An irreversible call in flight is never cut off: the cancel waits (up to
   * the call's own timeout) for its outcome to be recorded, so the session ends CANCELLED with
   * what really happened; past that it is refused with CALL_IN_FLIGHT, to be retried.
   */
  async cancel(id: string, cancelReason: string, by: string): Promise<SessionRecord> {
    // Followed from before the first read: the outcome of a call in flight wakes the wait below.
    const changes = this.#events.follow(id);
    try {
      return await this.#cancel(id, redactText(cancelReason), by, changes);
    } finally {
      changes.close();
    }
  }

  async #cancel(id: string, reason: string, by: string, changes: SessionFollower): Promise<SessionRecord> {
    const started = this.options.now();
    for (;;) {
      const s = await this.get(id);
      if (s.state === "CANCELLED") return s;
      if (isTerminal(s.state)) throw new OrchestratorError("SESSION_TERMINAL", `session ${id} already ended (${s.state}, ${s.stopReason ?? ""})`);
      const inFlight = this.#irreversibleInFlight(s);
      if (inFlight) {
        // Stops this replica's runner after the call is recorded (the call itself is not cut off),
        // so the policy decides nothing more before the cancel lands.
        this.#active.get(id)?.abort();
        const left = started + inFlight.timeoutMs + 1000 - this.options.now();
        if (left <= 0) {
          throw new OrchestratorError("CALL_IN_FLIGHT", `session ${id} has an irreversible ${inFlight.name} call in flight whose outcome is still being resolved; cancel again shortly`);
        }
        await changes.next(undefined, left);
        continue;
      }
      const done = sideEffectsOf(s, this.options.registry);
      const answer = `cancelled by ${by}${reason ? `: ${reason}` : ""}${done.length > 0 ? `; already done before the cancel: ${done.join(", ")}` : ""}`;
      try {
        const stopped = await this.#runner.stop(s, "cancelled", answer, {}, undefined, [], false);
        this.#active.get(id)?.abort();
        return stopped;
      } catch (error) {
        if (!(error instanceof StaleTransitionError)) throw error;
      }
    }
  }

  /** The irreversible tool a session is calling right now, if any. */
  #irreversibleInFlight(s: SessionRecord): RegisteredTool | undefined {
    if (s.state !== "TOOL_EXECUTING" && s.state !== "RETRYING") return undefined;
    const call = (s.pending as { call?: { tool?: string } } | null)?.call;
    const tool = call?.tool ? this.options.registry.get(call.tool) : undefined;
    return tool?.effect === Effect.IRREVERSIBLE_EXTERNAL ? tool : undefined;
  }

  /**
   * A human's answer to the approval a session waits on. It must name the approval and the
   * arguments hash that were shown (anything else is stale: nothing is approved), and come from
   * someone other than the session's creator (four eyes). The approver is the caller's
   * authenticated subject.
   */
  async resolveApproval(input: { sessionId: string; approvalId: string; argumentsHash: string; approve: boolean; approver: string; reason: string }): Promise<SessionRecord> {
    const s = await this.get(input.sessionId);
    if (isTerminal(s.state)) throw new OrchestratorError("SESSION_TERMINAL", `session ${s.id} already ended (${s.state})`);
    const pending = (s.pending ?? {}) as { approval?: PendingApproval; [k: string]: unknown };
    const approval = pending.approval;
    if (s.state !== "AWAITING_APPROVAL" || !approval || approval.approvalId !== input.approvalId || approval.argumentsHash !== input.argumentsHash) {
      throw new OrchestratorError(
        "APPROVAL_MISMATCH",
        `session ${s.id} is not waiting on approval ${input.approvalId} with arguments ${input.argumentsHash}${approval && s.state === "AWAITING_APPROVAL" ? ` (it waits on ${approval.approvalId} with arguments ${approval.argumentsHash}; look again)` : ""}; nothing was approved`,
      );
    }
    if (input.approver === s.createdBy) {
      throw new OrchestratorError("SELF_APPROVAL", `${input.approver} started session ${s.id} and cannot also ${input.approve ? "approve" : "deny"} its action; another person must`);
    }
    const now = this.options.now();
    if (approval.expiresAt <= now) throw new OrchestratorError("APPROVAL_EXPIRED", `approval ${approval.approvalId} expired at ${new Date(approval.expiresAt).toISOString()}`);
    const by = redactText(`${input.approver}${input.reason ? `: ${input.reason}` : ""}`);
    if (!input.approve) {
      const answer =
        approval.kind === "outcome_unknown"
          ? `${approval.tool} was not re-sent (denied by ${by}); whether its earlier attempt took effect is unknown: check ${approval.tool}'s records`
          : `${approval.tool} was not approved (denied by ${by}); nothing was executed`;
      return this.#runner.stop(s, "approval_denied", answer, {}, undefined, [], false);
    }
    const approved = await this.#runner.approve(s, input.approver, by);
    // Unleased since it began to wait: this replica claims it now if it has a free slot.
    this.#waiting = true;
    void this.#tick();
    return approved;
  }

  async trace(id: string): Promise<string[]> {
    await this.get(id);
    return this.options.traces.read(id);
  }

  /**
   * The session now, then its transitions and steps so far, then every new one as it is
   * persisted, until the session ends. Between changes it waits on the store's events, reading
   * only what is new when one arrives.
   */
  async *watch(id: string, signal: AbortSignal): AsyncGenerator<WatchEvent> {
    const changes = this.#events.follow(id);
    try {
      const s = await this.get(id);
      yield { kind: "snapshot", session: s };
      let ended = isTerminal(s.state);
      let version = 0;
      let steps = 0;
      while (!signal.aborted) {
        for (const audit of await this.options.store.auditTrail(id, version)) {
          yield { kind: "transition", audit };
          version = audit.version;
          ended ||= isTerminal(audit.to);
        }
        for (const step of await this.options.store.steps(id, steps)) {
          yield { kind: "step", step };
          steps = step.step;
        }
        if (ended) return;
        await changes.next(signal);
      }
    } finally {
      changes.close();
    }
  }

  async list(state: SessionState | undefined, limit: number, after: string | undefined) {
    return this.options.store.list({ ...(state ? { state } : {}), limit, ...(after ? { after } : {}) });
  }
}
