// Group commit for the SQLite session store: writes asked for in the same turn of the event loop
// (many sessions moving at once) run in one transaction, so one commit serves them all. Each caller
// is answered only after that commit, with its own result or error (a refused write leaves no
// trace); a failed commit fails them all. A batch runs without savepoints: when one of its writes
// fails, it is rolled back and run again with each write in its own savepoint (statements in a
// savepoint cost about twice as much: docs/performance.md). A commit takes at most
// MAX_GROUP_COMMIT writes, the rest wait for the next turn, so the tool calls of the sessions
// answered leave between turns.
import type Database from "better-sqlite3";
import type { SessionEvent } from "./session-store.js";

/** Most writes one group commit takes. */
const MAX_GROUP_COMMIT = 32;

interface PendingWrite {
  readonly run: (events: SessionEvent[]) => unknown;
  /** What the write changed, told to subscribers once its commit is done. */
  readonly events: SessionEvent[];
  readonly resolve: (r: never) => void;
  readonly reject: (e: unknown) => void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

/** A write's own failure in a batch run without savepoints: the batch rolled back, to be run isolated. */
class WriteFailed {
  constructor(readonly error: unknown) {}
}

export class GroupCommit {
  /** Every write in one transaction: a failing write rolls the batch back (WriteFailed). */
  private readonly batchTx: Database.Transaction<(batch: PendingWrite[]) => Outcome[]>;
  /** Each write in its own savepoint: a failing write leaves no trace and the others commit. */
  private readonly isolatedTx: Database.Transaction<(batch: PendingWrite[]) => Outcome[]>;
  private pending: PendingWrite[] = [];

  /** `emit` is told each committed write's events. */
  constructor(
    db: Database.Database,
    private readonly emit: (event: SessionEvent) => void,
  ) {
    this.batchTx = db.transaction((batch: PendingWrite[]): Outcome[] =>
      batch.map((write): Outcome => {
        try {
          return { ok: true, value: write.run(write.events) };
        } catch (error) {
          throw new WriteFailed(error);
        }
      }),
    );
    const savepoint = db.transaction((run: () => unknown) => run());
    this.isolatedTx = db.transaction((batch: PendingWrite[]): Outcome[] =>
      batch.map((write): Outcome => {
        write.events.length = 0;
        try {
          return { ok: true, value: savepoint(() => write.run(write.events)) };
        } catch (error) {
          // Rolled back to its savepoint: what it changed never happened.
          write.events.length = 0;
          return { ok: false, error };
        }
      }),
    );
  }

  write<T>(run: (events: SessionEvent[]) => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ run, events: [], resolve: resolve as (r: never) => void, reject });
      if (this.pending.length === 1) setImmediate(() => this.flush());
    });
  }

  private flush(): void {
    const batch = this.pending.splice(0, MAX_GROUP_COMMIT);
    if (this.pending.length > 0) setImmediate(() => this.flush());
    let outcomes: Outcome[];
    try {
      outcomes = this.run(batch);
    } catch (error) {
      for (const item of batch) item.reject(error);
      return;
    }
    for (const [i, outcome] of outcomes.entries()) {
      const item = batch[i]!;
      if (!outcome.ok) {
        item.reject(outcome.error);
        continue;
      }
      for (const event of item.events) this.emit(event);
      item.resolve(outcome.value as never);
    }
  }

  /** The batch's outcomes; throws what failed its BEGIN or COMMIT. */
  private run(batch: PendingWrite[]): Outcome[] {
    try {
      return this.batchTx.immediate(batch);
    } catch (error) {
      if (!(error instanceof WriteFailed)) throw error;
      // Alone in its batch, the write's failure is its outcome; run again, it would fail the same way.
      if (batch.length === 1) return [{ ok: false, error: error.error }];
      return this.isolatedTx.immediate(batch);
    }
  }
}
