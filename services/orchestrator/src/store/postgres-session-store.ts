// SessionStore on PostgreSQL, for several orchestrator replicas sharing sessions through leases: this file holds only
// its driver (its statements are in postgres-session-statements.ts), the rest is SqlSessionStore's. Round trips dominate
// here (about 0.6 ms each on a local socket), so the hot paths are single statements, parsed once per connection. The
// pool is sql-store's, with the orchestrator's bounds. Every replica LISTENs to the NOTIFY of every change and abort.
import {
  createPostgresPool,
  explainPostgresTlsError,
  inTransaction,
  isPostgresOutage,
  isPostgresUnavailable,
  POSTGRES_DEFAULTS,
  migratePostgres,
  postgresClientConfig,
  requireCurrentPostgres,
  Turns,
} from "@loopguard/sql-store";
import type pg from "pg";
import type { handSettleParams, MoneyChange, ReservationRow, reservationParams } from "./effect-reservations.js";
import { ILLEGAL_TRANSITION_SQLSTATE, POSTGRES_SESSION_MIGRATIONS } from "../migrations/postgres/index.js";
import { ABORTS_CHANNEL, ANNOUNCE_ABORT, SessionNotifications } from "./postgres-notifications.js";
import {
  changeMoney,
  lockNamesOf,
  otherEffectsRow,
  ownRowOf,
  settleHeld,
  reservationRowsOf,
  type RunStatement,
} from "./postgres-reservations.js";
import { CREATOR_QUOTA, OWN_PAGES, type Statement, VISIBLE_COUNTS } from "./postgres-session-sql.js";
import { bind, type Params, Q } from "./postgres-session-statements.js";
import { TRANSITION_PAIRS, type SessionState } from "../session/session-state.js";
import {
  SESSIONS_MIGRATION_STORE,
  type AuditRow,
  type ChargeParams,
  type ClaimParams,
  type WakeParams,
  type ErrorKind,
  type InsertParams,
  type MoveParams,
  type Moved,
  NotApplied,
  type PageParams,
  type SessionRow,
  type StepRow,
  type VisibilityParams,
} from "./sql-session-rows.js";
import { SqlSessionStore } from "./sql-session-store.js";
import { POSTGRES_STORE_DEFAULTS, type PostgresSessionStoreOptions } from "./postgres-store-options.js";
import { SessionQuotaExceededError } from "./session-store.js";

export { POSTGRES_STORE_DEFAULTS, type PostgresSessionStoreOptions } from "./postgres-store-options.js";

export class PostgresSessionStore extends SqlSessionStore {
  private notifications: SessionNotifications | undefined;
  private closed = false;
  // Turns on what transactions lock (a creator's creates, an order's or customer's reserves), taken before a pooled connection:
  // a burst on one key holds one connection, not the pool; an outage (or lock_timeout) fails the turns waiting with it.
  private readonly turns = new Turns<string>({ sharedFailure: isPostgresOutage });

  private constructor(
    private readonly pool: pg.Pool,
    options: PostgresSessionStoreOptions,
  ) {
    super(options.clock ? { ...options, now: options.clock.now } : options, (value) => value);
  }

  /** Connects, migrates (or, with `migrate: false`, checks) the schema (see migrations/postgres) and starts listening; the database itself must exist. */
  static async open(url: string, options: PostgresSessionStoreOptions = {}): Promise<PostgresSessionStore> {
    // Every wait bounded, so an outage surfaces as an error inside the API's deadlines.
    const statementTimeoutMs = options.statementTimeoutMs ?? POSTGRES_STORE_DEFAULTS.statementTimeoutMs;
    const bounds = {
      connectTimeoutMs: options.connectTimeoutMs ?? POSTGRES_STORE_DEFAULTS.connectTimeoutMs,
      statementTimeoutMs,
      lockTimeoutMs: statementTimeoutMs,
    };
    const settings = { ...bounds, applicationName: "loopguard-orchestrator" };
    const config = postgresClientConfig(url, settings);
    // The pool drops an idle client that lost its connection; the next query reports any outage.
    const pool = createPostgresPool(url, {
      ...settings,
      maxConnections: options.maxConnections ?? POSTGRES_DEFAULTS.maxConnections,
      observer: options.poolObserver,
      pipeline: true,
    });
    const store = new PostgresSessionStore(pool, options);
    try {
      // The store's first connection: a TLS setup that does not work fails here, said plainly.
      const ready =
        options.migrate === false
          ? requireCurrentPostgres(pool, SESSIONS_MIGRATION_STORE, POSTGRES_SESSION_MIGRATIONS)
          : migratePostgres(url, SESSIONS_MIGRATION_STORE, POSTGRES_SESSION_MIGRATIONS, {
              ...bounds,
              applicationName: "loopguard-orchestrator-migrate",
            });
      await ready.catch((error: unknown) => {
        throw explainPostgresTlsError(error, url);
      });
      await store.guard("open", () =>
        inTransaction(pool, async (c) => {
          await c.query(`LOCK TABLE session_transitions IN EXCLUSIVE MODE`);
          await c.query(`DELETE FROM session_transitions`);
          await c.query(
            `INSERT INTO session_transitions (from_state, to_state) SELECT * FROM unnest($1::text[], $2::text[])`,
            [TRANSITION_PAIRS.map(([f]) => f), TRANSITION_PAIRS.map(([, t]) => t)],
          );
        }),
      );
      await options.clock?.measure(pool);
      const checkMs = options.listenCheckMs ?? POSTGRES_STORE_DEFAULTS.listenCheckMs;
      store.notifications = await SessionNotifications.start(config, store.listeners, store.abortListeners, {
        checkMs,
        clock: options.clock,
      });
    } catch (err) {
      await pool.end();
      throw err;
    }
    return store;
  }

  protected errorKind(error: unknown): ErrorKind {
    if (isPostgresUnavailable(error)) return "unavailable";
    const code = typeof error === "object" && error !== null && "code" in error ? error.code : undefined;
    if (code === ILLEGAL_TRANSITION_SQLSTATE || code === "23514") return "illegal";
    return code === "23505" ? "duplicate" : "other";
  }

  private async rows<R extends pg.QueryResultRow>(
    s: Statement,
    params: Params,
    client: pg.ClientBase | pg.Pool = this.pool,
  ): Promise<R[]> {
    return (await client.query<R>(bind(s, params))).rows;
  }

  private readonly run: RunStatement = (s, params, client) => this.rows(s, params, client);

  private async changes(s: Statement, params: Params): Promise<number> {
    return (await this.pool.query(bind(s, params))).rowCount ?? 0;
  }

  protected async insert(p: InsertParams, signal?: AbortSignal): Promise<SessionRow | undefined> {
    const max = p.maxInFlight;
    if (max === null) return (await this.rows<SessionRow>(Q.insert, p))[0];
    // One creator's creates take turns on every replica (the lock), each counting after the previous one committed.
    // BEGIN, the lock and the count go out together: the server runs them in order, so the count still starts once the lock is held.
    const counted = () =>
      inTransaction(this.pool, async (client) => {
        const [, [count]] = await Promise.all([
          client.query(bind(CREATOR_QUOTA.lock, p)),
          this.rows<{ n: string; retried: boolean }>(CREATOR_QUOTA.inFlight, p, client),
        ]);
        if (!count!.retried && Number(count!.n) >= max) throw new SessionQuotaExceededError(p.createdBy, max);
        return (await this.rows<SessionRow>(Q.insert, p, client))[0];
      });
    return this.turns.take(`creator:${p.createdBy}`, counted, signal);
  }

  protected async byId(id: string): Promise<SessionRow | undefined> {
    return (await this.rows<SessionRow>(Q.byId, { id }))[0];
  }

  protected async byKey(createdBy: string, key: string): Promise<SessionRow | undefined> {
    return (await this.rows<SessionRow>(Q.byKey, { createdBy, key }))[0];
  }

  protected page(p: PageParams): Promise<SessionRow[]> {
    const all = p.state === null ? ([Q.all, Q.allAfter] as const) : ([Q.state, Q.stateAfter] as const);
    const own =
      p.state === null
        ? ([OWN_PAGES.own, OWN_PAGES.ownAfter] as const)
        : ([OWN_PAGES.ownState, OWN_PAGES.ownStateAfter] as const);
    const [first, after] =
      p.visibility === "all"
        ? all
        : p.visibility === "own"
          ? own
          : ([OWN_PAGES.ownOrWaiting, OWN_PAGES.ownOrWaitingAfter] as const);
    return this.rows<SessionRow>(p.afterId === null ? first : after, p);
  }

  protected stateCounts(p: VisibilityParams): Promise<{ state: SessionState; n: number }[]> {
    return this.rows(VISIBLE_COUNTS[p.visibility], p);
  }

  /**
   * Each move is one statement; moves through `via` share a transaction, a lone move needs none.
   * A transaction's moves go out together (with its BEGIN: one round trip), and it commits only
   * once every one of them applied: a move that matched no row makes the whole of it roll back.
   */
  protected async move(
    moves: MoveParams[],
    _current: unknown,
    money: MoneyChange | undefined,
    now: number,
  ): Promise<Moved> {
    const run = async (client: pg.ClientBase | pg.Pool): Promise<Moved> => {
      if (money) await changeMoney(this.run, client as pg.ClientBase, money, now);
      const moved = await Promise.all(moves.map((move) => this.rows<SessionRow>(Q.transition, move, client)));
      const rows = moved.map(([row]) => row);
      if (rows.some((row) => row === undefined)) throw new NotApplied();
      return { row: rows.at(-1)! };
    };
    if (moves.length === 1 && !money) return run(this.pool);
    return this.turns.takeEach(lockNamesOf(money), () => inTransaction(this.pool, run));
  }

  protected otherEffectRows(p: ReturnType<typeof reservationParams>) {
    return otherEffectsRow(this.run, p);
  }

  protected async insertPatrolRun(row: { run_id: string; finished_at: number; run: string }): Promise<void> {
    await this.changes(Q.insertPatrolRun, row);
  }

  protected patrolRunRows(limit: number): Promise<{ run_id: string; finished_at: string; run: unknown }[]> {
    return this.rows(Q.patrolRuns, { limit });
  }

  protected reservationRows(sessionId: string): Promise<ReservationRow[]> {
    return reservationRowsOf(this.run, sessionId);
  }

  protected reservationRow(key: string): Promise<ReservationRow | undefined> {
    return ownRowOf(this.run, key);
  }

  protected settleHeldRow(p: ReturnType<typeof handSettleParams>): Promise<ReservationRow | undefined> {
    return inTransaction(this.pool, (client) => settleHeld(this.run, client as pg.ClientBase, p));
  }

  protected stepRows(id: string, after: number): Promise<StepRow[]> {
    return this.rows(Q.steps, { id, after });
  }

  protected auditRows(id: string, after: number): Promise<AuditRow[]> {
    return this.rows(Q.auditTrail, { id, after });
  }

  protected claimRows(p: ClaimParams): Promise<SessionRow[]> {
    return this.rows(Q.claim, p);
  }

  protected wakeRows(p: WakeParams): Promise<SessionRow[]> {
    return this.rows(Q.wake, p);
  }

  protected async overdueRow(now: number): Promise<{ approvals: string; parked: string }> {
    return (await this.rows<{ approvals: string; parked: string }>(Q.overdue, { now }))[0]!;
  }

  protected async renew(p: { ids: string; owner: string; ttlMs: number }): Promise<string[]> {
    return (await this.rows<{ id: string }>(Q.renew, p)).map((r) => r.id);
  }

  protected async release(p: { id: string; owner: string }): Promise<boolean> {
    return (await this.changes(Q.release, p)) === 1;
  }

  protected async chargeRow(p: ChargeParams): Promise<boolean | undefined> {
    return (await this.rows<{ ended: boolean }>(Q.charge, p))[0]?.ended;
  }

  protected expiredApprovalRows(p: { now: number; limit: number }): Promise<SessionRow[]> {
    return this.rows(Q.expiredApprovals, p);
  }

  protected pruneStepRows(p: { before: number; limit: number }): Promise<number> {
    return this.changes(Q.pruneSteps, p);
  }

  protected async oldestStepRow(): Promise<string | null> {
    return (await this.rows<{ at: string | null }>(Q.oldestStep, {}))[0]?.at ?? null;
  }

  override async announceAbort(id: string): Promise<void> {
    await this.guard("announceAbort", () => this.pool.query(ANNOUNCE_ABORT, [ABORTS_CHANNEL, id]));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.notifications?.close();
    await this.pool.end();
  }
}
