import { describe, expect, it } from "vitest";
import type { Snapshot } from "./metrics.js";
import type { Plan, Step } from "./plan.js";
import type { SideEffectsCheck } from "./side-effects-check.js";
import { type DrillPod, type PlanRun, runPlan } from "./plan-run.js";
import type { ReleaseResult } from "../release/result.js";

const empty: Snapshot = { at: 0, pages: new Map() };
const pods: DrillPod[] = [{ name: "kb-search-0" }, { name: "kb-search-1" }];

/** A place, a load and a side-effects check that record what the steps asked of them. */
function world(steps: readonly Step[], overrides: Partial<Plan> = {}) {
  const calls: string[] = [];
  let started = false;
  const plan: Plan = {
    target: { service: "kb-search", grpcService: "loopguard.kb.v1.KbSearchService" },
    pace: "burst",
    budgetMs: 1000,
    boundMs: 200,
    baseline: { addedLatencyMs: 5 },
    steps,
    sideEffects: async () => check,
    ...overrides,
  };
  const check: SideEffectsCheck = {
    begin: async () => undefined,
    during: async () => undefined,
    end: async () => {
      throw new Error("not called by the runner");
    },
    approvalsResolved: 0,
  };
  const run: PlanRun = {
    plan,
    place: {
      targets: pods,
      kill: async (victims, mode) => {
        calls.push(`kill ${mode} ${victims.map((p) => p.name).join(",")}`);
        return `killed ${victims.length}`;
      },
      recover: async (victims) => {
        calls.push(`recover ${victims.length}`);
      },
      blueGreen: async (kind, to) => {
        calls.push(`${kind} ${to ?? "-"}`);
        const now = new Date().toISOString();
        return {
          kind,
          from: { image: "a" },
          to: { image: "b" },
          startedAt: now,
          timings: { totalMs: 1 },
        } as ReleaseResult;
      },
    },
    load: {
      sessions: [],
      started: [],
      startTimes: [],
      start: async () => {
        if (!started) calls.push("start-load");
        started = true;
      },
      ended: () => 0,
      allEnded: () => started,
      watch: async () => undefined,
    },
    sampler: { sample: async () => empty },
    first: empty,
    sideEffects: check,
    setFaults: async (targets, profile) => {
      calls.push(`faults ${targets.length} ${JSON.stringify(profile)}`);
    },
    progress: () => undefined,
    signal: new AbortController().signal,
  };
  return { run, calls };
}

describe("runPlan", () => {
  it("runs the steps in order and starts the load once", async () => {
    const { run, calls } = world([
      { do: "kill", pods: "all" },
      { do: "start-load" },
      { do: "start-load", wait: true },
      { do: "restore" },
    ]);
    const timeline = await runPlan(run);
    expect(calls).toEqual([
      "kill all kb-search-0,kb-search-1",
      "start-load",
      "recover 2",
      'faults 2 {"addedLatencyMs":5}',
    ]);
    expect(timeline.faults.map((f) => f.what)).toEqual(["killed 2", "restarting kb-search-0, kb-search-1"]);
  });

  it("records a dead window only when every target pod was killed", async () => {
    const all = await runPlan(world([{ do: "kill", pods: "all" }, { do: "restore" }]).run);
    const one = await runPlan(world([{ do: "kill", pods: "one" }, { do: "restore" }]).run);
    expect(all.deadWindows).toHaveLength(1);
    expect(one.deadWindows).toHaveLength(0);
  });

  it("says in the timeline that a pod left dead is not restarted", async () => {
    const timeline = await runPlan(world([{ do: "kill", pods: "one", restored: false }]).run);
    expect(timeline.faults[0]?.what).toBe("killed 1; not restarted");
  });

  it("refuses a restore without a kill before it", async () => {
    await expect(runPlan(world([{ do: "restore" }]).run)).rejects.toThrow("without a kill");
  });

  it("names the pods a fault profile is set on, and keeps notes in order", async () => {
    const { run, calls } = world([
      { do: "set-faults", profile: { errorRate: 0.5 }, what: "half fail on {pods} pods" },
      { do: "note", text: "first" },
      { do: "note", text: "second" },
    ]);
    const timeline = await runPlan(run);
    expect(calls).toContain('faults 2 {"errorRate":0.5}');
    expect(timeline.faults[0]?.what).toBe("half fail on 2 pods");
    expect(timeline.notes).toEqual(["first", "second"]);
  });

  it("repeats its steps until the sessions end, and counts the cycles", async () => {
    const { run, calls } = world([
      {
        do: "repeat",
        forMs: 60_000,
        steps: [{ do: "kill", pods: "all" }, { do: "start-load" }, { do: "restore" }],
        counted: "cycles",
      },
    ]);
    const timeline = await runPlan(run);
    expect(calls.filter((c) => c.startsWith("kill"))).toHaveLength(1);
    expect(timeline.notes).toEqual(["1 cycles"]);
  });

  it("releases and rolls back through the place, marking each", async () => {
    const { run, calls } = world([
      { do: "start-load" },
      { do: "release", kind: "release", to: "v2", announce: "releasing" },
      { do: "release", kind: "rollback", announce: "rolling back" },
    ]);
    const timeline = await runPlan(run);
    expect(calls).toEqual(["start-load", "release v2", "rollback -"]);
    expect(timeline.faults.map((f) => f.what.split(":")[0])).toEqual([
      "releasing",
      "released kb-search",
      "rolling back",
      "rolled back kb-search",
    ]);
  });

  it("says when every session ended before the calls that trigger the fault were offered: the fault met no session", async () => {
    const { run } = world([{ do: "start-load" }, { do: "trigger", on: "calls-offered" }, { do: "kill", pods: "all" }]);
    const timeline = await runPlan(run);
    expect(timeline.notes).toEqual([
      "every session had ended, having offered 0 of 1 calls to kb-search: the fault started with no session running, so this report shows nothing of what agents met during it",
    ]);
  });

  it("notes the sessions that had not ended when the bound passed", async () => {
    const { run } = world([{ do: "start-load" }]);
    const load = { ...run.load, started: ["a", "b"], allEnded: () => false };
    const timeline = await runPlan({ ...run, load });
    expect(timeline.notes).toEqual(["2 session(s) had not ended when the run's bound passed"]);
  });
});
