// Group commit for the SQLite session store: writes asked for in the same turn of the event loop
// (many sessions moving at once) run in one transaction, each in its own savepoint, so one commit
// serves them all. Each caller is answered only after that commit, with its own result or error (a
// refused write leaves no trace); a failed commit fails them all. A commit takes at most
// MAX_GROUP_COMMIT writes, the rest wait for the next turn, so the tool calls of the sessions
// answered leave between turns (docs/performance.md).
import type Database from "better-sqlite3";
import type { SessionEvent } from "./session-store.js";

/** Most writes one group commit takes. */
const MAX_GROUP_COMMIT = 16;

interface PendingWrite {
  readonly run: (events: SessionEvent[]) => unknown;
  /** What the write changed, told to subscribers once its commit is done. */
  readonly events: SessionEvent[];
  readonly resolve: (r: never) => void;
  readonly reject: (e: unknown) => void;
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export class GroupCommit {
  private readonly batchTx: Database.Transaction<(batch: PendingWrite[]) => Outcome[]>;
  private pending: PendingWrite[] = [];

  /** `emit` is told each committed write's events. */
  constructor(
    db: Database.Database,
    private readonly emit: (event: SessionEvent) => void,
  ) {
    const savepoint = db.transaction((run: () => unknown) => run());
    // A write alone in its batch needs no savepoint: if it fails, the whole transaction rolls back.
    this.batchTx = db.transaction((batch: PendingWrite[]): Outcome[] =>
      batch.length === 1
        ? [{ ok: true, value: batch[0]!.run(batch[0]!.events) }]
        : batch.map((write): Outcome => {
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
      outcomes = this.batchTx.immediate(batch);
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
}
