// One clock for the replicas sharing a PostgreSQL store. Times one replica writes and another compares (an approval's
// expiry, a session's start and so its wall-clock deadline, a parked call's wake time) would otherwise be each
// replica's own clock: one running ten minutes ahead ends the others' approvals and sessions ten minutes early. So
// they are read on the database's clock, as leases are measured by the database's clock itself: its time at the middle
// of a round trip, carried forward on this process's monotonic clock, so a step of the local wall clock (an NTP
// correction, a person setting it) moves no shared time. It is measured when the store opens and again on each check
// of its listening connection (a round trip made anyway); the local wall clock serves only until the first.
import type pg from "pg";
import { DB_NOW_MS } from "./postgres-session-sql.js";

/** An offset at least this large (either way) is told to `onSkew`, as is any later change of it by this much. */
export const CLOCK_SKEW_NOTICE_MS = 1000;
/** A sample whose round trip took longer than this is too uncertain to move an offset already measured. */
const MAX_SAMPLE_ROUND_TRIP_MS = 1000;

export class DatabaseClock {
  /** The database's time at the middle of the last round trip kept, and the monotonic clock's then. */
  #anchor: { readonly database: number; readonly mono: number } | undefined;
  #offset = 0;
  #told = 0;

  /**
   * @param base the local clock, epoch milliseconds (a test skews it to play a replica whose clock is off)
   * @param onSkew told the offset (database minus local, ms) when it is large, to be logged
   * @param mono a monotonic clock, milliseconds (performance.now)
   */
  constructor(
    private readonly base: () => number = Date.now,
    private readonly onSkew?: (offsetMs: number) => void,
    private readonly mono: () => number = () => performance.now(),
  ) {}

  /** The database's time, epoch milliseconds, as best known here; the local clock's until first measured. */
  readonly now = (): number => {
    const anchor = this.#anchor;
    return anchor ? Math.round(anchor.database + (this.mono() - anchor.mono)) : this.base();
  };

  /** Database time minus local time, in milliseconds, at the last measurement. */
  get offsetMs(): number {
    return this.#offset;
  }

  /** Measures with one round trip on `client`, returning the database's time; a failed one keeps the last and throws. */
  async measure(client: pg.ClientBase | pg.Pool): Promise<number> {
    const sent = this.mono();
    const { rows } = await client.query<{ ms: string }>(`SELECT ${DB_NOW_MS} AS ms`);
    const database = Number(rows[0]!.ms);
    this.#sample(sent, database, this.mono());
    return database;
  }

  #sample(sent: number, database: number, received: number): void {
    const measured = this.#anchor !== undefined;
    if (!Number.isFinite(database) || (measured && received - sent > MAX_SAMPLE_ROUND_TRIP_MS)) return;
    this.#anchor = { database, mono: (sent + received) / 2 };
    this.#offset = this.now() - this.base();
    const large = Math.abs(this.#offset) >= CLOCK_SKEW_NOTICE_MS;
    if ((large && !measured) || (measured && Math.abs(this.#offset - this.#told) >= CLOCK_SKEW_NOTICE_MS)) {
      this.#told = this.#offset;
      this.onSkew?.(this.#offset);
    }
  }
}
