// Time as a dependency, so tests can fix the timestamps a refund records.
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
