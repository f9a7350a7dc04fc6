// The orchestrator of one replica: claims sessions from the store under a lease, drives each
// with a SessionRunner, renews leases while it works, and serves the API operations. Several
// replicas can share one PostgreSQL store; a replica that dies loses its leases and another
// takes its sessions over.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { Effect, type Logger } from "@loopguard/tool-sdk";
import { DEFAULT_BUDGET } from "./budget.js";
import type { PendingApproval } from "./approvals.js";
import { isTerminal, type SessionState } from "./session-state.js";
import { type AuditRecord, type BudgetLimits, type JsonObject, type SessionRecord, type SessionStore, StaleTransitionError, type StepRecord } from "./session-store.js";
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

/**
 * `ses_` + 9 characters of creation time (milliseconds, base 36) + 11 random ones: ids of
 * sessions created together sort together, so the store's indexes keyed by session id (sessions,
 * audit rows, steps) touch a few recent pages per commit instead of one random page per session.
 */
function newSessionId(now: number): string {
  const time = now.toString(36).padStart(9, "0");
  // The random bytes come from randomUUID, which draws on a cached entropy pool: randomBytes asks
  // the CSPRNG on every call, about 1% of the orchestrator's CPU with one-step sessions. The
  // UUID's version digit (12) and variant digit (16) are fixed, so they are left out.
  const hex = randomUUID().replaceAll("-", "");
  const random = hex.slice(0, 12) + hex.slice(13, 16) + hex.slice(17);
  let id = `ses_${time}`;
  for (let i = 0; i < 22; i += 2) id += ID_ALPHABET[Number.parseInt(random.slice(i, i + 2), 16) % ID_ALPHABET.length];
  return id;
}

export class Orchestrator {
  readonly #runner: SessionRunner;
  readonly #active = new Map<string, AbortController>();
  #timer: NodeJS.Timeout | undefined;
  #renewTimer: NodeJS.Timeout | undefined;
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
  }

  get store(): SessionStore {
    return this.options.store;
  }

  /** Starts claiming and driving sessions, including every non-terminal one left by a previous run. */
  start(): void {
    this.#timer = setInterval(() => void this.#tick(), this.options.claimIntervalMs);
    this.#renewTimer = setInterval(() => void this.#renew(), Math.max(100, Math.floor(this.options.leaseTtlMs / 3)));
    void this.#tick();
  }

  /** Stops driving sessions and hands their leases back so another replica can take them at once. */
  async stop(): Promise<void> {
    this.#stopping = true;
    clearInterval(this.#timer);
    clearInterval(this.#renewTimer);
    for (const controller of this.#active.values()) controller.abort();
    // Irreversible calls in flight are not cut off by the abort: wait for them to finish and be
    // recorded, up to the longest such call's SLA timeout.
    const longestIrreversible = Math.max(0, ...this.options.registry.list().filter((t) => t.effect === Effect.IRREVERSIBLE_EXTERNAL).map((t) => t.timeoutMs));
    const deadline = Date.now() + Math.max(5000, longestIrreversible + 1000);
    while (this.#active.size > 0 && Date.now() < deadline) await sleep(20);
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
      if (free <= 0) return;
      this.#waiting = false;
      const claimed = await this.options.store.claim(this.options.owner, this.options.leaseTtlMs, free);
      for (const session of claimed) this.#drive(session);
    } catch (error) {
      this.options.log.error("claiming sessions failed", { error_name: (error as Error).name, error_message: (error as Error).message });
    } finally {
      this.#ticking = false;
      if (this.#tickAgain) void this.#tick();
    }
  }

  async #renew(): Promise<void> {
    for (const [id, controller] of this.#active) {
      const held = await this.options.store.renewLease(id, this.options.owner, this.options.leaseTtlMs).catch(() => false);
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
        while (!controller.signal.aborted) {
          const last = await this.#runner.run(session.id, controller.signal, current);
          current = undefined;
          if (!last || isTerminal(last.state)) break;
          if (last.state === "AWAITING_APPROVAL") {
            if (!(await this.#awaitHuman(last, controller.signal))) break;
          }
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

  /** Waits while a session waits for a human; ends it if the approval expires. False when it ended. */
  async #awaitHuman(s: SessionRecord, signal: AbortSignal): Promise<boolean> {
    for (;;) {
      await sleep(200, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) return false;
      const current = await this.options.store.get(s.id);
      if (!current || isTerminal(current.state)) return false;
      if (current.state !== "AWAITING_APPROVAL") return true;
      const approval = (current.pending as { approval?: PendingApproval } | null)?.approval;
      if (approval && approval.expiresAt <= this.options.now()) {
        await this.#runner.stop(current, "approval_denied", `approval ${approval.approvalId} expired unanswered`).catch(() => undefined);
        return false;
      }
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
    const reason = redactText(cancelReason);
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
        if (this.options.now() - started > inFlight.timeoutMs + 1000) {
          throw new OrchestratorError("CALL_IN_FLIGHT", `session ${id} has an irreversible ${inFlight.name} call in flight whose outcome is still being resolved; cancel again shortly`);
        }
        await sleep(50);
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
    return this.#runner.approve(s, input.approver, by);
  }

  async trace(id: string): Promise<string[]> {
    await this.get(id);
    return this.options.traces.read(id);
  }

  /**
   * The session now, then its transitions and steps so far, then every new one as it is
   * persisted, until the session ends.
   */
  async *watch(id: string, signal: AbortSignal, pollMs = 150): AsyncGenerator<WatchEvent> {
    let s = await this.get(id);
    yield { kind: "snapshot", session: s };
    let version = 0;
    let steps = 0;
    const catchUp = async function* (self: Orchestrator): AsyncGenerator<WatchEvent> {
      const trail = await self.options.store.auditTrail(id);
      for (const audit of trail.filter((a) => a.version > version)) yield { kind: "transition", audit };
      version = trail.at(-1)?.version ?? version;
      const all = await self.options.store.steps(id);
      for (const step of all.slice(steps)) yield { kind: "step", step };
      steps = all.length;
    };
    yield* catchUp(this);
    while (!isTerminal(s.state) && !signal.aborted) {
      await sleep(pollMs, undefined, { signal }).catch(() => undefined);
      const next = await this.options.store.get(id);
      if (!next) return;
      s = next;
      if (s.version !== version) yield* catchUp(this);
    }
  }

  async list(state: SessionState | undefined, limit: number, after: string | undefined) {
    return this.options.store.list({ ...(state ? { state } : {}), limit, ...(after ? { after } : {}) });
  }
}
