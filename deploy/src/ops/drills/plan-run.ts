// Executes a fault plan (plan.ts) step by step against wherever the drill runs, beside the load:
// the sessions watched, the plan's side-effects check running alongside, every fault marked on
// the run's timeline. It knows step kinds, not scenarios or tools; then it waits for every
// session to end (or the run's bound to pass).
import { setTimeout as sleep } from "node:timers/promises";
import type { ReleaseResult } from "../release/result.js";
import { elapsed, type SessionLoad } from "./load.js";
import { type MetricsSampler, type Snapshot, toolCallFigures } from "./metrics.js";
import type { FaultProfile, Plan, Step } from "./plan.js";
import type { SideEffectsCheck } from "./side-effects-check.js";
import type { KillMode } from "../../manifests/pod-chaos-objects.js";
import type { DeadWindow, FaultEvent } from "./report.js";

/**
 * The fault starts once the load is under way: the orchestrator's once this share of the sessions
 * has ended; a tool's once the sessions have offered it calls numbering this share of them.
 */
const TRIGGER_SHARE = 0.1;
const TRIGGER_TIMEOUT_MS = 20_000;
const TRIGGER_POLL_MS = 100;

/** A pod the drill may kill, by name. */
export interface DrillPod {
  readonly name: string;
}

/** What the steps act on where the drill runs (run.ts's DrillCluster). */
export interface Place {
  /** Pods of the service the drill is aimed at. */
  readonly targets: readonly DrillPod[];
  /** SIGKILLs the pods; says what was done. */
  kill(victims: readonly DrillPod[], mode: KillMode): Promise<string>;
  /** Brings the killed pods back and resolves once they serve. */
  recover(victims: readonly DrillPod[]): Promise<void>;
  /** A blue-green release of the target to an image tag, or a rollback to the set live before. */
  blueGreen(kind: "release" | "rollback", to: string | undefined, log: (line: string) => void): Promise<ReleaseResult>;
}

export interface PlanRun {
  readonly plan: Plan;
  readonly place: Place;
  readonly load: Pick<SessionLoad, "sessions" | "started" | "startTimes" | "start" | "ended" | "allEnded" | "watch">;
  readonly sampler: Pick<MetricsSampler, "sample">;
  /** The metrics before the load, the reference of the trigger on calls offered. */
  readonly first: Snapshot;
  readonly sideEffects: SideEffectsCheck;
  /** Sets a fault profile on target pods; undefined where the place sets none (a cluster). */
  readonly setFaults: ((pods: readonly DrillPod[], profile: FaultProfile) => Promise<void>) | undefined;
  readonly progress: (line: string) => void;
  readonly signal: AbortSignal;
}

export interface Timeline {
  /** When the plan started: the zero of the fault timeline. */
  readonly t0: number;
  readonly faults: FaultEvent[];
  readonly deadWindows: DeadWindow[];
  readonly notes: string[];
}

/** Runs the plan's steps while the sessions are watched, then waits for them to end. */
export async function runPlan(run: PlanRun): Promise<Timeline> {
  const runner = new Runner(run);
  const stop = new AbortController();
  const helping = run.sideEffects.during(stop.signal);
  const watching = run.load.watch(stop.signal, runner.t0, () => runner.faultNow);
  try {
    await runner.steps(run.plan.steps);
    await run.load.start();
    const rest = runner.t0 + run.plan.boundMs - Date.now();
    if (!(await runner.until(() => run.load.allEnded(), Math.max(0, rest))))
      runner.timeline.notes.push(
        `${run.load.started.length - run.load.ended()} session(s) had not ended when the run's bound passed`,
      );
  } finally {
    stop.abort();
    await Promise.all([helping, watching]);
  }
  return runner.timeline;
}

class Runner {
  readonly t0 = Date.now();
  readonly timeline: Timeline = { t0: this.t0, faults: [], deadWindows: [], notes: [] };
  faultNow = "no fault yet";
  /** The last kill's pods, until they are restored. */
  #down: { victims: readonly DrillPod[]; before: Snapshot; fromMs: number } | undefined;
  /** The end of the repeat being run, for holds capped by it. */
  #repeatEnd = Number.POSITIVE_INFINITY;

  constructor(private readonly run: PlanRun) {}

  async steps(steps: readonly Step[]): Promise<void> {
    for (const step of steps) await this.step(step);
  }

  /** Polls `condition` until it holds (true) or `timeoutMs` passes (false); Ctrl-C throws. */
  async until(condition: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      if (Date.now() >= deadline) return false;
      if (this.run.signal.aborted) throw this.run.signal.reason;
      await sleep(100);
    }
    return true;
  }

  mark(what: string): void {
    this.timeline.faults.push({ atMs: Date.now() - this.t0, what });
    this.faultNow = what;
    this.run.progress(`[${elapsed(this.t0)}] ${what}`);
  }

  private async step(step: Step): Promise<void> {
    const { load, place } = this.run;
    const allEnded = () => load.allEnded();
    switch (step.do) {
      case "start-load": {
        const starting = load.start();
        // Not waited for: a failed start surfaces when the run waits for the load at its end.
        starting.catch(() => undefined);
        if (step.wait) await starting;
        return;
      }
      case "trigger":
        return this.trigger(step.on);
      case "kill": {
        const victims =
          step.pods === "all" ? place.targets : [place.targets[Math.floor(Math.random() * place.targets.length)]!];
        const before = await this.run.sampler.sample();
        this.#down = { victims, before, fromMs: Date.now() - this.t0 };
        const what = await place.kill(victims, step.pods);
        this.mark(step.restored === false ? `${what}; not restarted` : what);
        return;
      }
      case "restore":
        return this.restore();
      case "hold": {
        const ms = step.capped ? Math.min(step.ms, Math.max(0, this.#repeatEnd - Date.now())) : step.ms;
        await this.until(allEnded, ms);
        return;
      }
      case "repeat": {
        this.#repeatEnd = Date.now() + step.forMs;
        let cycles = 0;
        while (Date.now() < this.#repeatEnd && !allEnded()) {
          await this.steps(step.steps);
          cycles += 1;
        }
        this.#repeatEnd = Number.POSITIVE_INFINITY;
        this.timeline.notes.push(`${cycles} ${step.counted}`);
        return;
      }
      case "set-faults":
        await this.run.setFaults?.(place.targets, step.profile);
        this.mark(step.what.replace("{pods}", String(place.targets.length)));
        return;
      case "release":
        return this.release(step.kind, step.to, step.announce);
      case "note":
        this.timeline.notes.push(step.text);
        return;
    }
  }

  private async trigger(on: "sessions-ended" | "calls-offered"): Promise<void> {
    const { load, plan, sampler, first } = this.run;
    const trigger = Math.max(1, Math.ceil(load.sessions.length * TRIGGER_SHARE));
    if (on === "sessions-ended") {
      if (!(await this.until(() => load.ended() >= trigger, TRIGGER_TIMEOUT_MS)))
        this.timeline.notes.push(
          `the load had not ended ${trigger} sessions after ${TRIGGER_TIMEOUT_MS / 1000} s; the fault started anyway`,
        );
      return;
    }
    // Calls under way, not sessions ended: sessions call the target early, so waiting for sessions
    // to end would leave it no calls to fail.
    const { service, grpcService } = plan.target;
    const deadline = Date.now() + TRIGGER_TIMEOUT_MS;
    let offered = 0;
    while (Date.now() < deadline && !load.allEnded()) {
      offered = toolCallFigures(first, await sampler.sample(), service, grpcService).offered;
      if (offered >= trigger) return;
      await sleep(TRIGGER_POLL_MS);
    }
    this.timeline.notes.push(
      load.allEnded()
        ? `every session had ended, having offered ${offered} of ${trigger} calls to ${service}: the fault started with no session running, so this report shows nothing of what agents met during it`
        : `the sessions had offered ${offered} of ${trigger} calls to ${service} after ${TRIGGER_TIMEOUT_MS / 1000} s; the fault started anyway`,
    );
  }

  private async restore(): Promise<void> {
    const { place, plan, sampler } = this.run;
    const down = this.#down;
    if (!down) throw new Error("a restore step without a kill before it");
    this.#down = undefined;
    const names = down.victims.map((p) => p.name).join(", ");
    this.mark(`restarting ${names}`);
    await place.recover(down.victims);
    const after = await sampler.sample();
    await this.run.setFaults?.(down.victims, plan.baseline);
    this.faultNow = "no fault";
    this.run.progress(`[${elapsed(this.t0)}] ${names} SERVING again`);
    if (down.victims.length === place.targets.length) {
      const figures = toolCallFigures(down.before, after, plan.target.service, plan.target.grpcService);
      this.timeline.deadWindows.push({
        fromMs: down.fromMs,
        toMs: Date.now() - this.t0,
        offered: figures.offered,
        attempts: figures.attempts,
      });
    }
  }

  private async release(kind: "release" | "rollback", to: string | undefined, announce: string): Promise<void> {
    const { place, plan, load } = this.run;
    this.mark(announce);
    const log = (line: string) => this.run.progress(`[${elapsed(this.t0)}] release: ${line}`);
    const r = await place.blueGreen(kind, to, log);
    const flippedAt = Date.parse(r.flippedAt ?? r.startedAt);
    // The sessions asked for between a flip and the old set's drain are the ones whose calls moved sets.
    const drainedAt = r.drainedAt ? Date.parse(r.drainedAt) : Date.now();
    const during = load.startTimes.filter((t) => t >= flippedAt && t <= drainedAt).length;
    const seconds = (ms: number) => (ms / 1000).toFixed(1);
    this.mark(
      `${r.kind === "release" ? "released" : "rolled back"} ${plan.target.service}: ${r.from.image} → ${r.to.image}, serving after ${seconds(r.timings.startMs ?? 0)} s, ` +
        `flipped at ${seconds(flippedAt - this.t0)} s, old set drained after ${seconds(r.timings.totalMs ?? 0)} s` +
        (r.clientsLeftAtDrain ? ` (${r.clientsLeftAtDrain} client connection(s) still on it)` : "") +
        `; ${during} sessions started between the flip and the drain`,
    );
    if (during === 0)
      this.timeline.notes.push(
        `no session started between the ${kind}'s flip and its drain: a longer --duration keeps the load on through it`,
      );
  }
}
