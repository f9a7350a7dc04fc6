// The row-level protocol a SQL session store's backend supplies (its statements, run on its
// driver), with the row mapping and the outage translation every backend shares.
import type {
  handSettleParams,
  MoneyChange,
  OthersRow,
  ReservationRow,
  reservationParams,
} from "./effect-reservations.js";
import type { SessionState } from "../session/session-state.js";
import type {
  AuditRow,
  ChargeParams,
  ClaimParams,
  ErrorKind,
  InsertParams,
  MoveParams,
  Moved,
  PageParams,
  SessionRow,
  StepRow,
  VisibilityParams,
  WakeParams,
} from "./sql-session-rows.js";
import {
  StoreUnavailableError,
  type JsonObject,
  type JsonValue,
  type SessionRecord,
  type SessionStoreOptions,
} from "./session-store.js";
import { SessionListeners } from "./session-store-support.js";

export abstract class SqlSessionDriver {
  protected readonly listeners = new SessionListeners();
  protected readonly now: () => number;
  readonly #onUnavailable: ((error: StoreUnavailableError) => void) | undefined;

  constructor(
    options: SessionStoreOptions,
    /** A JSON column's value as the driver returns it, parsed. */
    protected readonly json: (value: unknown) => unknown,
  ) {
    this.now = options.now ?? Date.now;
    this.#onUnavailable = options.onUnavailable;
  }

  protected abstract errorKind(error: unknown): ErrorKind;
  /**
   * Inserts unless the id or (creator, key) is taken; undefined on a (creator, key) conflict. With
   * `maxInFlight`, a creator without such a key and already at its quota gets SessionQuotaExceededError.
   * `signal`: see NewSession.signal.
   */
  protected abstract insert(p: InsertParams, signal?: AbortSignal): Promise<SessionRow | undefined>;
  protected abstract byId(id: string): Promise<SessionRow | undefined>;
  protected abstract byKey(createdBy: string, key: string): Promise<SessionRow | undefined>;
  protected abstract page(p: PageParams): Promise<SessionRow[]>;
  /** Counts by state; a state may come in several rows (e.g. live and ended ones apart), which add up. */
  protected abstract stateCounts(p: VisibilityParams): Promise<{ state: SessionState; n: number }[]>;
  /**
   * All moves, and the money change with them, in one transaction; throws NotApplied or
   * ReservationRefusedError (nothing written) when a move matches no row or a reserve goes above its limits.
   */
  protected abstract move(
    moves: MoveParams[],
    current: SessionRecord | undefined,
    money: MoneyChange | undefined,
    now: number,
  ): Promise<Moved>;
  protected abstract otherEffectRows(p: ReturnType<typeof reservationParams>): Promise<OthersRow>;
  protected abstract reservationRows(sessionId: string): Promise<ReservationRow[]>;
  protected abstract reservationRow(key: string): Promise<ReservationRow | undefined>;
  /** The reservation settled with the totals in one transaction; undefined (nothing written) unless it was held. */
  protected abstract settleHeldRow(p: ReturnType<typeof handSettleParams>): Promise<ReservationRow | undefined>;
  protected abstract stepRows(sessionId: string, afterStep: number): Promise<StepRow[]>;
  protected abstract auditRows(sessionId: string, afterVersion: number): Promise<AuditRow[]>;
  protected abstract claimRows(p: ClaimParams): Promise<SessionRow[]>;
  protected abstract wakeRows(p: WakeParams): Promise<SessionRow[]>;
  protected abstract overdueRow(now: number): Promise<{ approvals: number | string; parked: number | string }>;
  /** `ids`: a JSON array of session ids; returns those renewed. */
  protected abstract renew(p: {
    ids: string;
    owner: string;
    ttlMs: number;
    now: number;
    expiresAt: number;
  }): Promise<string[]>;
  protected abstract release(p: { id: string; owner: string }): Promise<boolean>;
  /** Adds `tokens`, `costMicros` and `toolCalls` to an ended session's usage, the `live` ones to a live one's; whether it had ended (undefined: no session). */
  protected abstract chargeRow(p: ChargeParams): Promise<boolean | undefined>;
  protected abstract expiredApprovalRows(p: { now: number; limit: number }): Promise<SessionRow[]>;
  protected abstract pruneStepRows(p: { before: number; limit: number }): Promise<number>;
  protected abstract oldestStepRow(): Promise<number | string | null>;
  protected abstract insertPatrolRun(row: { run_id: string; finished_at: number; run: string }): Promise<void>;
  protected abstract patrolRunRows(
    limit: number,
  ): Promise<{ run_id: string; finished_at: number | string; run: unknown }[]>;
  abstract close(): Promise<void>;

  protected toRecord(r: SessionRow): SessionRecord {
    const context = this.json(r.context) as JsonObject;
    if (r.history_len !== null) context.history = r.history == null ? [] : (this.json(r.history) as JsonValue[]);
    return {
      id: r.id,
      state: r.state,
      version: r.version,
      goal: r.goal,
      task: this.json(r.task) as JsonObject,
      budget: this.json(r.budget) as SessionRecord["budget"],
      usage: this.json(r.usage) as SessionRecord["usage"],
      context,
      pending: r.pending === null ? null : (this.json(r.pending) as JsonObject),
      scopes: this.json(r.scopes) as string[],
      policy: r.policy,
      stopReason: r.stop_reason,
      answer: r.answer,
      createdAt: Number(r.created_at),
      updatedAt: Number(r.updated_at),
      leaseOwner: r.lease_owner,
      leaseExpiresAt: r.lease_expires_at === null ? null : Number(r.lease_expires_at),
      idempotencyKey: r.idempotency_key,
      createdBy: r.created_by,
      requestHash: r.request_hash,
    };
  }

  /** Runs one store operation; a database that cannot serve becomes StoreUnavailableError. */
  protected async guard<T>(operation: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      if (error instanceof StoreUnavailableError || this.errorKind(error) !== "unavailable") throw error;
      const unavailable = new StoreUnavailableError(operation, error);
      this.#onUnavailable?.(unavailable);
      throw unavailable;
    }
  }
}
