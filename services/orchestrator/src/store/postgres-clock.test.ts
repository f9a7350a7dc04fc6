import { describe, expect, it } from "vitest";
import { DatabaseClock } from "./postgres-clock.js";

const TEN_MINUTES = 600_000;

/** A replica's clocks and the database's, each moved by the test; a query answers the database's time. */
function world(localBehindMs: number) {
  const t = { local: 1_800_000_000_000 - localBehindMs, database: 1_800_000_000_000, mono: 5_000 };
  const pass = (ms: number) => {
    t.local += ms;
    t.database += ms;
    t.mono += ms;
  };
  /** One round trip of 4 ms, the local wall clock stepped by `stepMs` while it is in flight. */
  const client = (stepMs = 0) => ({
    query: async () => {
      pass(2);
      t.local += stepMs;
      const answer = { rows: [{ ms: String(t.database) }] };
      pass(2);
      return answer;
    },
  });
  return { t, pass, client };
}

describe("DatabaseClock", () => {
  it("reads the database's time on a replica whose clock is off, and the local clock before it has measured", async () => {
    const { t, pass, client } = world(TEN_MINUTES);
    const clock = new DatabaseClock(
      () => t.local,
      undefined,
      () => t.mono,
    );
    expect(clock.now()).toBe(t.local);
    await clock.measure(client() as never);
    pass(1000);
    expect(clock.now()).toBe(t.database);
    expect(clock.offsetMs).toBe(TEN_MINUTES);
  });

  it("moves no shared time when the local wall clock is stepped, during a measurement or between two", async () => {
    const { t, pass, client } = world(TEN_MINUTES);
    const skews: number[] = [];
    const clock = new DatabaseClock(
      () => t.local,
      (offset) => skews.push(offset),
      () => t.mono,
    );
    await clock.measure(client() as never);
    // NTP steps the replica's clock into line while the next probe is in flight, then once more between probes.
    await clock.measure(client(TEN_MINUTES) as never);
    pass(10);
    expect(Math.abs(clock.now() - t.database)).toBeLessThanOrEqual(2);
    t.local -= 60_000;
    pass(4000);
    expect(Math.abs(clock.now() - t.database)).toBeLessThanOrEqual(2);
    await clock.measure(client() as never);
    expect(Math.abs(clock.now() - t.database)).toBeLessThanOrEqual(2);
    // The log hears of the offset when first measured, and of each change since told.
    expect(skews).toEqual([TEN_MINUTES, 0, 60_000]);
  });
});
