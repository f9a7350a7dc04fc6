// The clock of SQLite's one process: the machine's wall clock, followed without jumping. Its times are compared
// with the same process's later readings (a lease's expiry, an approval's, a session's wall-clock deadline), so a
// step of the wall clock (an NTP correction, a person setting it) would run them all out at once: the process would
// count its own leases lost, take its sessions back from itself and re-issue their calls in flight. This clock runs
// on the monotonic clock and closes a gap to the wall clock at a bounded rate instead: at most half as fast again
// while behind, half as fast while ahead, never backward. A lease renewed every third of its TTL then holds through
// any step. A gap larger than SLEW_LIMIT_MS (a machine that slept, a clock set by hours) is followed at once, as
// times that far off would mislead whoever reads them. No library keeps such a clock for a process (chrony and
// ntpd slew the system's), so it is written here.

/** How fast a gap to the wall clock closes: this much of each elapsed millisecond. */
export const SLEW_RATE = 0.5;
/** A gap to the wall clock at least this large is followed at once, not slewed. */
export const SLEW_LIMIT_MS = 600_000;
/** A step at least this large (the gap's change between two readings) is told to `onStep`. */
const STEP_NOTICE_MS = 1000;

export class SlewingClock {
  #last: number;
  #lastMono: number;
  /** The gap to the wall clock left open by the last reading (+ while behind). */
  #gapLeft = 0;

  /**
   * @param wall the machine's wall clock, epoch milliseconds
   * @param onStep told a step of the wall clock (ms, + forward) when it is seen, and whether it is slewed or followed
   * @param mono a monotonic clock, milliseconds (performance.now)
   */
  constructor(
    private readonly wall: () => number = Date.now,
    private readonly onStep?: (stepMs: number, slewed: boolean) => void,
    private readonly mono: () => number = () => performance.now(),
  ) {
    this.#last = wall();
    this.#lastMono = mono();
  }

  /** Epoch milliseconds: the wall clock's, less any gap still being closed. */
  readonly now = (): number => {
    const mono = this.mono();
    const elapsed = Math.max(0, mono - this.#lastMono);
    this.#lastMono = mono;
    const free = this.#last + elapsed;
    const gap = this.wall() - free;
    // What the wall clock moved since the last reading, beyond the time that passed: a step. Judged on the change,
    // not on whether a gap is open, as the wall clock's whole milliseconds leave one of less than 1 ms open often.
    const step = gap - this.#gapLeft;
    if (Math.abs(gap) >= SLEW_LIMIT_MS) {
      this.onStep?.(Math.round(step), false);
      this.#gapLeft = 0;
      this.#last = free + gap;
      return Math.round(this.#last);
    }
    if (Math.abs(step) >= STEP_NOTICE_MS) this.onStep?.(Math.round(step), true);
    const most = elapsed * SLEW_RATE;
    const closed = Math.min(most, Math.max(-most, gap));
    this.#last = free + closed;
    this.#gapLeft = gap - closed;
    return Math.round(this.#last);
  };
}

/** The log line of a step `onStep` was told. */
export function clockStepNotice(stepMs: number, slewed: boolean): string {
  return slewed
    ? `this machine's clock stepped by ${stepMs} ms; the store's clock closes the gap over ${Math.ceil(Math.abs(stepMs) / SLEW_RATE / 1000)} s, so no lease runs out`
    : `this machine's clock stepped by ${stepMs} ms, too far to slew; the store's clock follows it at once, and leases held may run out`;
}
