// One clock for the replicas sharing a PostgreSQL store. Times one replica writes and another compares (an approval's
// expiry, a session's start and so its wall-clock deadline, a parked call's wake time) would otherwise be each
// replica's own clock: one running ten minutes ahead ends the others' approvals and sessions ten minutes early. So
// they are read from the local clock plus an offset measured against the database's, as leases are measured by the
// database's clock itself. The offset is measured when the store opens and again on each check of its listening
// connection (a round trip made anyway), the database's time taken to be that of the middle of the round trip.
import type pg from "pg";
import { DB_NOW_MS } from "./postgres-session-sql.js";

/** An offset at least this large (either way) is told to `onSkew`, as is any later change of it by this much. */
export const CLOCK_SKEW_NOTICE_MS = 1000;
/** A sample whose round trip took longer than this is too uncertain to move an offset already measured. */
const MAX_SAMPLE_ROUND_TRIP_MS = 1000;

export class DatabaseClock {
  #offset = 0;
  #measured = false;
  #told = 0;

  /**
   * @param base the local clock, epoch milliseconds (a test skews it to play a replica whose clock is off)
   * @param onSkew told the offset (database minus local, ms) when it is large, to be logged
   */
  constructor(
    private readonly base: () => number = Date.now,
    private readonly onSkew?: (offsetMs: number) => void,
  ) {}

  /** The database's time, epoch milliseconds, as best known here; the local clock's until first measured. */
  readonly now = (): number => this.base() + this.#offset;

  /** Database time minus local time, in milliseconds. */
  get offsetMs(): number {
    return this.#offset;
  }

  /** Measures the offset with one round trip on `client`, returning the database's time; a failed one keeps the offset and throws. */
  async measure(client: pg.ClientBase | pg.Pool): Promise<number> {
    const sent = this.base();
    const { rows } = await client.query<{ ms: string }>(`SELECT ${DB_NOW_MS} AS ms`);
    const database = Number(rows[0]!.ms);
    this.#sample(sent, database, this.base());
    return database;
  }

  #sample(sent: number, database: number, received: number): void {
    if (!Number.isFinite(database) || (this.#measured && received - sent > MAX_SAMPLE_ROUND_TRIP_MS)) return;
    this.#offset = Math.round(database - (sent + received) / 2);
    const large = Math.abs(this.#offset) >= CLOCK_SKEW_NOTICE_MS;
    if ((large && !this.#measured) || (this.#measured && Math.abs(this.#offset - this.#told) >= CLOCK_SKEW_NOTICE_MS)) {
      this.#told = this.#offset;
      this.onSkew?.(this.#offset);
    }
    this.#measured = true;
  }
}
