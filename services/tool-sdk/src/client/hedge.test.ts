import { describe, expect, it } from "vitest";
import { LatencyWindow, SlowReplicas } from "./hedge.js";

describe("LatencyWindow", () => {
  it("gives the p95 of the recent answers, forgetting the oldest beyond its window", () => {
    const window = new LatencyWindow();
    for (let ms = 1; ms <= 100; ms++) window.add(ms);
    expect(window.p95()).toBe(95);
    // 256 fast answers later the slow ones are gone.
    for (let i = 0; i < 256; i++) window.add(2);
    expect(window.p95()).toBe(2);
  });
});

describe("SlowReplicas", () => {
  const seenAll = (slow: SlowReplicas) => {
    for (const a of ["a", "b", "c"]) slow.answered(a);
  };

  it("avoids a replica late three times in a row, for a while; an answer in time resets the count", () => {
    const slow = new SlowReplicas(3, 10_000);
    seenAll(slow);
    slow.late("a", 0);
    slow.late("a", 0);
    slow.answered("a");
    slow.late("a", 0);
    slow.late("a", 0);
    expect(slow.avoided(0)).toEqual([]);
    slow.late("a", 0);
    expect(slow.avoided(1)).toEqual(["a"]);
    expect(slow.avoided(10_001)).toEqual([]);
  });

  it("avoids at most half the replicas: at the cap the one avoided longest ago makes way", () => {
    const slow = new SlowReplicas(1, 10_000);
    seenAll(slow);
    slow.late("b", 0);
    slow.late("a", 5);
    expect(slow.avoided(6)).toEqual(["a"]);
  });

  it("avoids none with one replica", () => {
    const slow = new SlowReplicas(1, 10_000);
    slow.answered("a");
    slow.late("a", 0);
    expect(slow.avoided(1)).toEqual([]);
  });
});
