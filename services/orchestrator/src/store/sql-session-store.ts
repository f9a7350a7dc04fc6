// What the SQLite and PostgreSQL session stores share, written once: argument checks, row
// mapping, paging, `whyNotApplied` and error translation (the named parameters of every write
// are built in sql-session-rows.ts). A backend keeps only its SQL and its driver (see
// sqlite-session-store.ts, postgres-session-store.ts); both run the same layout, made by
// versioned migrations (migrations/).
import type { HandSettlement, OtherEffects, Reservation, ReservationRecord } from "./effect-reservations.js";
import {
  handSettleParams,
  othersBesides,
  othersOf,
  reservationParams,
  toReservationRecord,
} from "./effect-reservations.js";
import { IllegalTransitionError, type SessionState } from "../session/session-state.js";
import { type InsertParams, type Moved, moveParams, NotApplied, toAudit, visibilityOf } from "./sql-session-rows.js";
import {
  DuplicateStepError,
  LeaseLostError,
  SessionExistsError,
  SessionNotFoundError,
  StaleTransitionError,
  StoreUnavailableError,
  type AuditRecord,
  type JsonObject,
  type ListQuery,
  type NewSession,
  type PatrolRunRow,
  type SessionListener,
  type SessionPage,
  type SessionReader,
  type SessionRecord,
  type SessionStore,
  type Spend,
  type StepRecord,
  type TransitionInput,
} from "./session-store.js";
import { SqlSessionDriver } from "./sql-session-driver.js";
import {
  checkLimit,
  checkTtl,
  byCreated,
  wakeAtOf,
  decodeCursor,
  emptyCounts,
  encodeCursor,
  initialUsage,
  withStoredSpend,
} from "./session-store-support.js";

/** A SessionStore over SQL; a subclass supplies the statements, each run on its driver. */
export abstract class SqlSessionStore extends SqlSessionDriver implements SessionStore {
  async recordPatrolRun(run: PatrolRunRow): Promise<void> {
    await this.guard("recordPatrolRun", () =>
      this.insertPatrolRun({ run_id: run.runId, finished_at: run.finishedAt, run: JSON.stringify(run.run) }),
    );
  }

  async patrolRuns(limit: number): Promise<PatrolRunRow[]> {
    checkLimit(limit);
    const rows = await this.guard("patrolRuns", () => this.patrolRunRows(limit));
    return rows.map((r) => ({
      runId: r.run_id,
      finishedAt: Number(r.finished_at),
      run: this.json(r.run) as JsonObject,
    }));
  }

  async create(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    input.signal?.throwIfAborted();
    if (input.maxInFlight !== undefined && (!Number.isInteger(input.maxInFlight) || input.maxInFlight < 1)) {
      throw new RangeError(`maxInFlight must be a positive integer, got ${input.maxInFlight}`);
    }
    const now = this.now();
    const params: InsertParams = {
      id: input.id,
      goal: input.goal,
      task: JSON.stringify(input.task),
      budget: JSON.stringify(input.budget),
      usage: JSON.stringify(initialUsage(now)),
      scopes: JSON.stringify(input.scopes),
      policy: input.policy,
      now,
      leaseOwner: input.lease?.owner ?? null,
      leaseTtlMs: input.lease?.ttlMs ?? null,
      leaseExpiresAt: input.lease ? now + input.lease.ttlMs : null,
      idempotencyKey: input.idempotencyKey ?? null,
      createdBy: input.createdBy,
      requestHash: input.requestHash ?? null,
      maxInFlight: input.maxInFlight ?? null,
    };
    const row = await this.guard("create", () => this.insert(params, input.signal)).catch((error: unknown) => {
      throw this.errorKind(error) === "duplicate" ? new SessionExistsError(input.id) : error;
    });
    if (row) return { session: this.toRecord(row), created: true };
    const key = input.idempotencyKey;
    const existing = key === undefined ? undefined : await this.guard("create", () => this.byKey(input.createdBy, key));
    if (existing) return { session: this.toRecord(existing), created: false };
    throw new SessionExistsError(input.id);
  }

  async get(id: string): Promise<SessionRecord | null> {
    const row = await this.guard("get", () => this.byId(id));
    return row ? this.toRecord(row) : null;
  }

  async list(query: ListQuery): Promise<SessionPage> {
    checkLimit(query.limit);
    const after = query.after === undefined ? undefined : decodeCursor(query.after);
    const state = query.state ?? null;
    const rows = await this.guard("list", () =>
      this.page({
        state,
        limit: query.limit + 1,
        afterAt: after?.createdAt ?? null,
        afterId: after?.id ?? null,
        ...visibilityOf(query.visibleTo, state),
      }),
    );
    const sessions = rows.slice(0, query.limit).map((r) => this.toRecord(r));
    const last = sessions.at(-1);
    return { sessions, nextCursor: rows.length > query.limit && last ? encodeCursor(last) : null };
  }

  async countByState(visibleTo?: SessionReader): Promise<Record<SessionState, number>> {
    const counts = emptyCounts();
    for (const { state, n } of await this.guard("countByState", () => this.stateCounts(visibilityOf(visibleTo, null))))
      counts[state] += Number(n);
    return counts;
  }

  async transition(t: TransitionInput): Promise<SessionRecord> {
    const now = this.now();
    const moves = moveParams(t, now);
    let moved: Moved;
    try {
      moved = await this.guard("transition", () => this.move(moves, t.current, t.money, now));
    } catch (error) {
      if (error instanceof NotApplied) throw await this.whyNotApplied(t);
      // Only reached if code and database disagree about TRANSITIONS (e.g. an older binary's table).
      const kind = error instanceof StoreUnavailableError ? "unavailable" : this.errorKind(error);
      if (kind === "illegal")
        throw new IllegalTransitionError(t.from, t.to, `refused by the database: ${(error as Error).message}`);
      if (kind === "duplicate" && t.step) throw new DuplicateStepError(t.id, t.step.step);
      throw error;
    }
    const patch = t.patch ?? {};
    if ("row" in moved) {
      const record = this.toRecord(moved.row);
      // A statement's RETURNING sees the history as it was before the statement wrote it.
      return patch.context === undefined ? record : { ...record, context: patch.context };
    }
    // The row is what the caller moved from plus the patch; the lease and the spend (tokens, price,
    // tool calls, retries) come from the row (a renewal may have changed the one, a charge the other).
    const last = moves.at(-1)!;
    return {
      ...t.current!,
      usage: withStoredSpend(patch.usage ?? t.current!.usage, moved.spent),
      ...(patch.context !== undefined ? { context: patch.context } : {}),
      ...(patch.pending !== undefined ? { pending: patch.pending } : {}),
      ...(patch.answer !== undefined ? { answer: patch.answer } : {}),
      state: last.to,
      stopReason: last.stopReason,
      version: last.version,
      updatedAt: last.at,
      leaseOwner: moved.lease.owner,
      leaseExpiresAt: moved.lease.expiresAt,
    };
  }

  private async whyNotApplied(t: TransitionInput): Promise<Error> {
    const row = await this.guard("transition", () => this.byId(t.id));
    if (!row) return new SessionNotFoundError(t.id);
    const actual = { state: row.state, version: row.version };
    if (row.state !== t.from || row.version !== t.expectedVersion) {
      return new StaleTransitionError(t.id, { state: t.from, version: t.expectedVersion }, actual);
    }
    return new LeaseLostError(t.id, actual, t.owner ?? "", row.lease_owner);
  }

  async steps(sessionId: string, afterStep = 0): Promise<StepRecord[]> {
    const rows = await this.guard("steps", () => this.stepRows(sessionId, afterStep));
    return rows.map((r) => ({ step: r.step, at: Number(r.at), payload: this.json(r.payload) as JsonObject }));
  }

  pruneSteps(before: number, limit: number): Promise<number> {
    return this.guard("pruneSteps", () => this.pruneStepRows({ before, limit }));
  }

  async oldestStepAt(): Promise<number | null> {
    const at = await this.guard("oldestStepAt", () => this.oldestStepRow());
    return at === null ? null : Number(at);
  }

  async auditTrail(sessionId: string, afterVersion = 0): Promise<AuditRecord[]> {
    return (await this.guard("auditTrail", () => this.auditRows(sessionId, afterVersion))).map(toAudit);
  }

  async claim(owner: string, ttlMs: number, limit: number): Promise<SessionRecord[]> {
    if (owner === "") throw new RangeError("owner must not be empty");
    checkTtl(ttlMs);
    checkLimit(limit);
    const now = this.now();
    const rows = await this.guard("claim", () => this.claimRows({ owner, ttlMs, now, expiresAt: now + ttlMs, limit }));
    return rows.map((r) => this.toRecord(r)).sort(byCreated);
  }

  async wake(
    owner: string,
    ttlMs: number,
    limit: number,
    recovered: Readonly<Record<string, number>> = {},
  ): Promise<SessionRecord[]> {
    if (owner === "") throw new RangeError("owner must not be empty");
    checkTtl(ttlMs);
    checkLimit(limit);
    const now = this.now();
    const rows = await this.guard("wake", () =>
      this.wakeRows({ owner, ttlMs, now, expiresAt: now + ttlMs, limit, recovered: JSON.stringify(recovered) }),
    );
    return rows.map((r) => this.toRecord(r)).sort((a, b) => wakeAtOf(a) - wakeAtOf(b) || byCreated(a, b));
  }

  async overdue(now: number): Promise<{ approvals: number; parkedNearDeadline: number }> {
    const row = await this.guard("overdue", () => this.overdueRow(now));
    return { approvals: Number(row.approvals), parkedNearDeadline: Number(row.parked) };
  }

  async renewLeases(ids: readonly string[], owner: string, ttlMs: number): Promise<Set<string>> {
    checkTtl(ttlMs);
    if (ids.length === 0) return new Set();
    const now = this.now();
    return new Set(
      await this.guard("renewLeases", () =>
        this.renew({ ids: JSON.stringify(ids), owner, ttlMs, now, expiresAt: now + ttlMs }),
      ),
    );
  }

  async releaseLease(id: string, owner: string): Promise<boolean> {
    return this.guard("releaseLease", () => this.release({ id, owner }));
  }

  async charge(id: string, spend: Spend, live: Spend): Promise<"ended" | "live" | undefined> {
    const ended = await this.guard("charge", () =>
      this.chargeRow({
        id,
        tokens: spend.tokens,
        costMicros: spend.costMicros,
        toolCalls: spend.toolCalls ?? 0,
        retries: spend.retries ?? 0,
        liveTokens: live.tokens,
        liveCostMicros: live.costMicros,
        liveToolCalls: live.toolCalls ?? 0,
        liveRetries: live.retries ?? 0,
      }),
    );
    return ended === undefined ? undefined : ended ? "ended" : "live";
  }

  async expiredApprovals(now: number, limit: number): Promise<SessionRecord[]> {
    checkLimit(limit);
    return (await this.guard("expiredApprovals", () => this.expiredApprovalRows({ now, limit }))).map((r) =>
      this.toRecord(r),
    );
  }

  async otherEffects(r: Reservation, customerSince: number): Promise<OtherEffects> {
    const params = reservationParams(r, customerSince, this.now());
    const [sums, own] = await this.guard("otherEffects", () =>
      Promise.all([this.otherEffectRows(params), this.reservationRow(r.key)]),
    );
    return othersBesides(r, params.sinceBucket, othersOf(sums), own);
  }

  async reservations(sessionId: string): Promise<ReservationRecord[]> {
    return (await this.guard("reservations", () => this.reservationRows(sessionId))).map(toReservationRecord);
  }

  async settleHeld(s: HandSettlement): Promise<ReservationRecord | undefined> {
    const row = await this.guard("settleHeld", () => this.settleHeldRow(handSettleParams(s, this.now())));
    return row && toReservationRecord(row);
  }

  subscribe(listener: SessionListener): () => void {
    return this.listeners.add(listener);
  }

  /** Told of every abort announced; PostgreSQL's listening connection calls them. */
  protected readonly abortListeners = new Set<(id: string) => void>();

  /** Nothing to announce beyond this process (SQLite); PostgreSQL's store overrides it. */
  async announceAbort(_id: string): Promise<void> {}

  onAbort(listener: (id: string) => void): () => void {
    this.abortListeners.add(listener);
    return () => this.abortListeners.delete(listener);
  }
}
