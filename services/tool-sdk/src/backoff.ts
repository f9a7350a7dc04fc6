// The one exponential backoff of the suite: every wait-and-try-again (client retries, store outages,
// parked sessions, reconnects, restarts, drills) computes its delay here.

/** How the random part is spread: full = uniform in [0, d]; equal = d/2 fixed plus [0, d/2]; none = d. */
export type Jitter = "full" | "equal" | "none";

export interface Backoff {
  readonly baseMs: number;
  readonly maxMs: number;
  readonly jitter: Jitter;
}

/**
 * The wait before the `attempt`-th retry (1 = the first retry): base·2^(attempt−1) capped at maxMs,
 * spread by the jitter so callers that failed together do not come back together.
 */
export function backoffDelayMs(backoff: Backoff, attempt: number, random: () => number = Math.random): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  const ceiling = Math.min(backoff.maxMs, backoff.baseMs * 2 ** exponent);
  switch (backoff.jitter) {
    case "full":
      return random() * ceiling;
    case "equal":
      return ceiling / 2 + (random() * ceiling) / 2;
    case "none":
      return ceiling;
  }
}
