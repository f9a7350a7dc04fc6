import { Gauge, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { SESSION_STATES, type SessionState } from "../session/session-state.js";
import { PATROL_GAUGE, TimeSeries } from "./time-series.js";

function counts(done: number): Record<SessionState, number> {
  return { ...(Object.fromEntries(SESSION_STATES.map((s) => [s, 0])) as Record<SessionState, number>), DONE: done };
}

describe("TimeSeries", () => {
  it("keeps one hour of samples at most, oldest dropped first", async () => {
    let now = 0;
    let done = 0;
    const series = new TimeSeries({
      store: { countByState: async () => counts(done++) },
      registry: new Registry(),
      clients: new Map(),
      intervalMs: 10_000,
      now: () => now,
    });
    for (let i = 0; i < 400; i++) {
      await series.run();
      now += 10_000;
    }
    const answer = series.response(true);
    expect(answer.at).toHaveLength(360);
    expect(answer.sessions?.find((s) => s.state === "DONE")?.counts?.slice(0, 2)).toEqual([40, 41]);
  });

  it("keeps the last counts while the store cannot answer, and the patrol's ratio once its gauge is there", async () => {
    const registry = new Registry();
    let fail = false;
    const series = new TimeSeries({
      store: { countByState: async () => (fail ? Promise.reject(new Error("down")) : counts(3)) },
      registry,
      clients: new Map(),
      intervalMs: 1000,
      now: Date.now,
    });
    await series.run();
    fail = true;
    new Gauge({ name: PATROL_GAUGE, help: "last patrol run", registers: [registry] }).set(0.75);
    await series.run();
    const answer = series.response(true);
    expect(answer.sessions?.find((s) => s.state === "DONE")?.counts).toEqual([3, 3]);
    expect(answer.patrolSuccessRatio).toEqual([{}, { value: 0.75 }]);
    expect(series.response(false).sessions).toEqual([]);
  });
});
