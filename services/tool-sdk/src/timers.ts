/** The longest delay setTimeout keeps: a longer one fires at once (Node warns, and uses 1 ms). */
export const MAX_TIMER_MS = 2 ** 31 - 1;
