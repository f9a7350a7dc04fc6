import { describe, expect, it } from "vitest";
import { SLEW_LIMIT_MS, SlewingClock } from "./slewing-clock.js";

/** A wall clock and a monotonic one, passed together by the test; the wall clock stepped on its own. */
function world() {
  const t = { wall: 1_800_000_000_000, mono: 5_000 };
  const steps: [number, boolean][] = [];
  const clock = new SlewingClock(
    () => t.wall,
    (stepMs, slewed) => steps.push([stepMs, slewed]),
    () => t.mono,
  );
  const pass = (ms: number) => {
    t.wall += ms;
    t.mono += ms;
  };
  return { t, clock, steps, pass };
}

describe("SlewingClock", () => {
  it("reads the wall clock while it runs evenly", () => {
    const { t, clock, steps, pass } = world();
    for (let i = 0; i < 10; i += 1) {
      pass(1234);
      expect(clock.now()).toBe(t.wall);
    }
    expect(steps).toEqual([]);
  });

  it("closes a forward step of 30 s at half a millisecond per millisecond, then reads the wall clock again", () => {
    const { t, clock, steps, pass } = world();
    const before = clock.now();
    t.wall += 30_000;
    pass(100);
    expect(clock.now() - before).toBe(150);
    // A lease renewed every 100 ms with a TTL of 300 ms: no reading between renewals runs 300 ms ahead.
    let last = clock.now();
    for (let elapsed = 100; elapsed < 60_000; elapsed += 100) {
      pass(100);
      const now = clock.now();
      expect(now - last).toBeLessThanOrEqual(150);
      last = now;
    }
    expect(clock.now()).toBe(t.wall);
    expect(steps).toEqual([[30_000, true]]);
  });

  it("tells a step while a gap of less than a millisecond is open, as the wall clock's whole milliseconds leave", () => {
    const { t, clock, steps } = world();
    // Two readings 0.1 ms apart, the wall clock 0.6 ms ahead of the monotonic one: a sub-millisecond gap stays open.
    t.wall += 1;
    t.mono += 0.4;
    clock.now();
    t.mono += 0.1;
    clock.now();
    t.wall += 30_000;
    t.mono += 100;
    t.wall += 100;
    clock.now();
    expect(steps.map(([stepMs, slewed]) => [Math.abs(stepMs - 30_000) <= 1, slewed])).toEqual([[true, true]]);
  });

  it("tells a second step made while the first is still being closed", () => {
    const { t, clock, steps, pass } = world();
    t.wall += 30_000;
    pass(100);
    clock.now();
    pass(1000);
    clock.now();
    t.wall += 5000;
    pass(100);
    clock.now();
    expect(steps).toEqual([
      [30_000, true],
      [5000, true],
    ]);
  });

  it("never reads backward after a backward step: it runs at half speed until the wall clock catches up", () => {
    const { t, clock, steps, pass } = world();
    let last = clock.now();
    t.wall -= 20_000;
    for (let elapsed = 0; elapsed < 40_000; elapsed += 500) {
      pass(500);
      const now = clock.now();
      expect(now - last).toBe(250);
      last = now;
    }
    pass(500);
    expect(clock.now()).toBe(t.wall);
    expect(steps).toEqual([[-20_000, true]]);
  });

  it("follows a step past the limit at once (a machine that slept), and says it did not slew it", () => {
    const { t, clock, steps, pass } = world();
    t.wall += SLEW_LIMIT_MS + 60_000;
    pass(10);
    expect(clock.now()).toBe(t.wall);
    expect(steps).toEqual([[SLEW_LIMIT_MS + 60_000, false]]);
  });
});
