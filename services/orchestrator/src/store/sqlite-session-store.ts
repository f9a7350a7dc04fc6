// SessionStore on one SQLite file (better-sqlite3, WAL, synchronous=NORMAL: a committed transition
// survives a process crash): only its driver (statements in sqlite-session-statements.ts), the rest
// is SqlSessionStore's. Each write runs to its end before another caller here gets a turn;
// BEGIN IMMEDIATE and busy_timeout cover other processes.
import {
  assessSchema,
  inSqliteTurn,
  isSqliteUnavailable,
  migrateSqlite,
  openSqlite,
  requireCurrent,
  type SchemaOptions,
  sqliteLedger,
} from "@loopguard/sql-store";
import Database from "better-sqlite3";
import type { handSettleParams, MoneyChange, ReservationRow, reservationParams } from "./effect-reservations.js";
import { SQLITE_SESSION_MIGRATIONS } from "../migrations/sqlite/index.js";
import { isTerminal, TRANSITION_PAIRS, type SessionState } from "../session/session-state.js";
import {
  SESSIONS_MIGRATION_STORE,
  type ErrorKind,
  type InsertParams,
  insertedRow,
  type MoveParams,
  type Moved,
  NotApplied,
  type PageParams,
  type AuditRow,
  type ChargeParams,
  type ClaimParams,
  type WakeParams,
  type SessionRow,
  type StepRow,
  type VisibilityParams,
} from "./sql-session-rows.js";
import { SqlSessionStore } from "./sql-session-store.js";
import { GroupCommit } from "./sqlite-group-commit.js";
import { SqliteReservations } from "./sqlite-reservations.js";
import { prepare } from "./sqlite-session-statements.js";
import {
  type SessionEvent,
  SessionQuotaExceededError,
  type SessionRecord,
  type SessionStoreOptions,
} from "./session-store.js";

const changed = (r: Pick<SessionRow, "id" | "version" | "state" | "lease_owner">): SessionEvent => ({
  kind: "changed",
  id: r.id,
  version: r.version,
  state: r.state,
  leaseOwner: r.lease_owner,
});

export interface SqliteSessionStoreOptions extends SessionStoreOptions, SchemaOptions {
  /**
   * How long a write waits for another process holding the file's write lock before the store
   * reports itself unavailable. The orchestrator is the file's only writer, so a wait means a
   * backup or a hand-run tool; it stays well inside the API's deadlines (better-sqlite3 waits
   * synchronously, holding the event loop).
   */
  readonly busyTimeoutMs?: number;
}

export class SqliteSessionStore extends SqlSessionStore {
  private readonly stmt: ReturnType<typeof prepare>;
  private readonly money: SqliteReservations;
  private readonly writes: GroupCommit;

  private constructor(
    private readonly db: Database.Database,
    options: SqliteSessionStoreOptions,
  ) {
    super(options, (value) => JSON.parse(value as string));
    this.stmt = prepare(db);
    this.money = new SqliteReservations(db);
    this.writes = new GroupCommit(db, (event) => this.listeners.emit(event));
  }

  /** Opens (creating it if missing) and migrates (or, with `migrate: false`, checks) the file, then makes its copy of TRANSITIONS match this build's. */
  static async open(file: string, options: SqliteSessionStoreOptions = {}): Promise<SqliteSessionStore> {
    const db = openSqlite(file, { synchronous: "NORMAL", busyTimeoutMs: options.busyTimeoutMs ?? 1000 });
    try {
      // This copy is written in the file's migration turn: another open's migration in this process
      // holds the write lock across awaits, and waiting for it here would block its way to COMMIT.
      const copyTransitions = () => {
        const insert = db.prepare(`INSERT INTO session_transitions (from_state, to_state) VALUES (?, ?)`);
        db.transaction(() => {
          db.exec(`DELETE FROM session_transitions`);
          for (const [from, to] of TRANSITION_PAIRS) insert.run(from, to);
        }).immediate();
      };
      // migrateSqlite turns foreign keys off while it migrates (a layout change rebuilds tables others refer to).
      if (options.migrate === false)
        await inSqliteTurn(db, () => {
          requireCurrent(
            assessSchema(
              SESSIONS_MIGRATION_STORE,
              SQLITE_SESSION_MIGRATIONS,
              sqliteLedger(db, SESSIONS_MIGRATION_STORE),
            ),
          );
          copyTransitions();
        });
      else await migrateSqlite(db, SESSIONS_MIGRATION_STORE, SQLITE_SESSION_MIGRATIONS, copyTransitions);
      db.pragma("foreign_keys = ON");
      return new SqliteSessionStore(db, options);
    } catch (error) {
      db.close();
      throw error;
    }
  }

  protected errorKind(error: unknown): ErrorKind {
    if (isSqliteUnavailable(error)) return "unavailable";
    const code = error instanceof Database.SqliteError ? error.code : undefined;
    if (code === "SQLITE_CONSTRAINT_TRIGGER" || code === "SQLITE_CONSTRAINT_CHECK") return "illegal";
    return code === "SQLITE_CONSTRAINT_PRIMARYKEY" ? "duplicate" : "other";
  }

  private write<T>(run: (events: SessionEvent[]) => T): Promise<T> {
    return this.writes.write(run);
  }

  protected insert(p: InsertParams, signal?: AbortSignal): Promise<SessionRow | undefined> {
    return this.write((events) => {
      signal?.throwIfAborted();
      // Counted in the create's own write transaction, which no other writer shares.
      const retried = p.idempotencyKey !== null && this.stmt.keyTaken.get(p) !== undefined;
      if (p.maxInFlight !== null && !retried && this.stmt.inFlight.get(p)!.n >= p.maxInFlight)
        throw new SessionQuotaExceededError(p.createdBy, p.maxInFlight);
      if (this.stmt.insert.run(p).changes === 0) return undefined;
      const row = insertedRow(p);
      events.push(changed(row));
      return row;
    });
  }

  protected async byId(id: string): Promise<SessionRow | undefined> {
    return this.stmt.byId.get({ id });
  }

  protected async byKey(createdBy: string, key: string): Promise<SessionRow | undefined> {
    return this.stmt.byKey.get({ createdBy, key });
  }

  protected async page(p: PageParams): Promise<SessionRow[]> {
    const { pages } = this.stmt;
    const all = p.state === null ? pages.all : isTerminal(p.state) ? pages.ended : pages.open;
    const stmts =
      p.visibility === "all"
        ? all
        : p.visibility === "ownOrWaiting"
          ? pages.ownOrWaiting
          : p.state === null
            ? pages.own
            : pages.ownInState;
    return (p.afterId === null ? stmts.first : stmts.after).all(p);
  }

  protected async stateCounts(p: VisibilityParams): Promise<{ state: SessionState; n: number }[]> {
    return this.stmt.countByState[p.visibility].all(p);
  }

  /** Per move, the optimistic-lock UPDATE and its audit row; the last move carries the patch, the history rows and the step. */
  protected move(
    moves: MoveParams[],
    current: SessionRecord | undefined,
    money: MoneyChange | undefined,
    now: number,
  ): Promise<Moved> {
    return this.write((events) => {
      // In the write's own transaction (or savepoint): a refused reserve, or a move that matches no row, undoes both.
      if (money) this.money.change(money, now);
      const last = moves.at(-1)!;
      for (const move of moves) {
        const into =
          move !== last ? "hop" : isTerminal(move.to) ? "terminal" : move.releasesLease ? "awaiting" : "live";
        if ((into === "hop" ? this.stmt.hop : this.stmt.move[into]).run(move).changes !== 1) throw new NotApplied();
        this.stmt.audit.run(move);
      }
      if (last.setContext) {
        if (last.historyKept === 0) this.stmt.clearHistory.run(last);
        for (const [i, item] of last.historyItems.entries())
          this.stmt.appendHistory.run({ id: last.id, seq: last.historyKept + i, item });
      }
      if (last.step !== null) this.stmt.appendStep.run(last);
      const lease = this.stmt.leaseOf.get(last)!;
      events.push({
        kind: "changed",
        id: last.id,
        version: last.version,
        state: last.to,
        leaseOwner: lease.lease_owner,
      });
      if (!current) return { row: this.stmt.byId.get(last)! };
      const { lease_owner: owner, lease_expires_at: expiresAt, tokens, costMicros, toolCalls, retries } = lease;
      return { lease: { owner, expiresAt }, spent: { tokens, costMicros, toolCalls, retries: retries ?? undefined } };
    });
  }

  protected async otherEffectRows(p: ReturnType<typeof reservationParams>) {
    return this.money.othersRow(p);
  }

  protected async insertPatrolRun(row: { run_id: string; finished_at: number; run: string }): Promise<void> {
    this.db.prepare(`INSERT INTO patrol_runs (run_id, finished_at, run) VALUES (@run_id, @finished_at, @run)`).run(row);
  }

  protected async patrolRunRows(limit: number): Promise<{ run_id: string; finished_at: number; run: string }[]> {
    return this.db
      .prepare<[number], { run_id: string; finished_at: number; run: string }>(
        `SELECT * FROM patrol_runs ORDER BY finished_at DESC, run_id DESC LIMIT ?`,
      )
      .all(limit);
  }

  protected async reservationRows(sessionId: string): Promise<ReservationRow[]> {
    return this.money.rowsOf(sessionId);
  }

  protected async reservationRow(key: string): Promise<ReservationRow | undefined> {
    return this.money.ownRow(key);
  }

  protected settleHeldRow(p: ReturnType<typeof handSettleParams>): Promise<ReservationRow | undefined> {
    return this.write(() => this.money.settleHeld(p));
  }

  protected async stepRows(id: string, after: number): Promise<StepRow[]> {
    return this.stmt.steps.all({ id, after });
  }

  protected async auditRows(id: string, after: number): Promise<AuditRow[]> {
    return this.stmt.auditTrail.all({ id, after });
  }

  protected async claimRows(p: ClaimParams): Promise<SessionRow[]> {
    return this.write(() => this.stmt.claim.all(p).map(({ id }) => this.stmt.byId.get({ id })!));
  }

  protected wakeRows(p: WakeParams): Promise<SessionRow[]> {
    return this.write(() => {
      const ids = this.stmt.wakeDue.all(p).map(({ id }) => id);
      if (ids.length < p.limit && p.recovered !== "{}")
        ids.push(...this.stmt.wakeRecovered.all({ ...p, limit: p.limit - ids.length }).map(({ id }) => id));
      return ids.map((id) => this.stmt.byId.get({ id })!);
    });
  }

  protected async overdueRow(now: number): Promise<{ approvals: number; parked: number }> {
    return this.stmt.overdue.get({ now })!;
  }

  protected renew(p: { ids: string; owner: string; now: number; expiresAt: number }): Promise<string[]> {
    return this.write(() => this.stmt.renew.all(p).map((r) => r.id));
  }

  protected release(p: { id: string; owner: string }): Promise<boolean> {
    return this.write((events) => {
      const row = this.stmt.release.get(p);
      if (row) events.push(changed(row));
      return row !== undefined;
    });
  }

  protected chargeRow(p: ChargeParams): Promise<boolean | undefined> {
    return this.write((events) => {
      const row = this.stmt.charge.get(p);
      if (row) events.push({ kind: "charged", id: p.id });
      return row === undefined ? undefined : row.ended === 1;
    });
  }

  protected async expiredApprovalRows(p: { now: number; limit: number }): Promise<SessionRow[]> {
    return this.stmt.expiredApprovals.all(p);
  }

  protected pruneStepRows(p: { before: number; limit: number }): Promise<number> {
    return this.write(() => this.stmt.pruneSteps.run(p).changes);
  }

  protected async oldestStepRow(): Promise<number | null> {
    return this.stmt.oldestStep.get()?.at ?? null;
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}
