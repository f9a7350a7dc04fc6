// The load of a drill: the planned sessions started (all at once, or one by one over the run for
// a release), watched through the orchestrators' API like a dashboard until they end, and read
// back at the end (each session's state, outcome and step records).
import { setTimeout as sleep } from "node:timers/promises";
import {
  isTerminal,
  listAll,
  type OrchestratorApi,
  type SessionView,
  startSession,
  tracesOf,
} from "./orchestrator-api.js";
import type { SessionOutcome } from "./report.js";
import { traceFacts } from "./trace-facts.js";
import type { PlannedSession } from "./session-plan.js";

/** burst: every session at once; steady: one by one, evenly over `spreadMs`. */
export type Pace = "burst" | "steady";

export interface LoadOptions {
  readonly pace: Pace;
  readonly spreadMs: number;
  /** Each session's wall-clock budget. */
  readonly budgetMs: number;
  readonly progress: (line: string) => void;
  readonly signal: AbortSignal;
}

/** Seconds since `t0`, for progress lines. */
export function elapsed(t0: number): string {
  return `${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s`;
}

function describe(sessions: readonly PlannedSession[]): string {
  const refunds = sessions.filter((p) => p.kind === "refund").length;
  return `${refunds} refunds, ${sessions.filter((p) => p.needsApproval).length} of them for a high-risk customer`;
}

export class SessionLoad {
  /** Ids of the sessions the orchestrators acknowledged, in the order they were. */
  readonly started: string[] = [];
  /** When each session was asked for. */
  readonly startTimes: number[] = [];
  readonly #ids: (string | undefined)[];
  #latest = new Map<string, SessionView>();
  #starting: Promise<void> | undefined;
  #loaded = false;

  constructor(
    private readonly api: OrchestratorApi,
    readonly sessions: readonly PlannedSession[],
    private readonly options: LoadOptions,
  ) {
    this.#ids = sessions.map(() => undefined);
  }

  /** Starts the load the first time it is called; every call settles when every start has been answered. */
  start(): Promise<void> {
    this.#starting ??= this.#start().then(() => {
      this.#loaded = true;
    });
    return this.#starting;
  }

  /** Started sessions that ended, as last watched. */
  ended(): number {
    return this.started.filter((id) => isTerminal(this.#latest.get(id)?.state ?? "")).length;
  }

  /** Every session started and every started one ended. */
  allEnded(): boolean {
    return this.#loaded && this.ended() === this.started.length;
  }

  /** Polls the sessions until `signal` aborts, with a progress line every 2 s ending in `status()`. */
  async watch(signal: AbortSignal, t0: number, status: () => string): Promise<void> {
    let lastLine = 0;
    while (!signal.aborted) {
      const views = await listAll(this.api).catch(() => undefined);
      const wanted = new Set(this.started);
      if (views) this.#latest = new Map(views.filter((v) => wanted.has(v.sessionId)).map((v) => [v.sessionId, v]));
      if (Date.now() - lastLine >= 2000) {
        lastLine = Date.now();
        const latest = [...this.#latest.values()];
        const done = latest.filter((v) => v.state === "DONE").length;
        const waiting = latest.filter((v) => v.state === "AWAITING_APPROVAL").length;
        this.options.progress(
          `[${elapsed(t0)}] ${this.ended()}/${this.started.length} ended (done ${done}), ${waiting} awaiting approval; ${status()}`,
        );
      }
      await sleep(250, undefined, { signal }).catch(() => undefined);
    }
  }

  /** Every planned session as it ended (or did not): its final view and what its step records say. */
  async outcomes(): Promise<SessionOutcome[]> {
    const final = new Map((await listAll(this.api)).map((v) => [v.sessionId, v]));
    const traces = await tracesOf(this.api, this.started);
    return this.sessions.map((p, i) => {
      const id = this.#ids[i];
      const v = id ? final.get(id) : undefined;
      const records = id ? traces.get(id) : undefined;
      return {
        kind: p.kind,
        needsApproval: p.needsApproval,
        sessionId: v?.sessionId,
        state: v?.state,
        stopReason: v?.stopReason ?? "",
        outcome: v?.outcome ?? "",
        outcomeReason: v?.outcomeReason ?? "",
        answer: v?.answer ?? "",
        durationMs: v ? Math.max(0, v.updatedAtMs - v.createdAtMs) : undefined,
        trace: records ? traceFacts(records) : undefined,
      };
    });
  }

  async #start(): Promise<void> {
    const { pace, spreadMs, progress, signal } = this.options;
    const count = this.sessions.length;
    const at = Date.now();
    if (pace === "steady") {
      const gapMs = spreadMs / count;
      progress(
        `starting ${count} sessions one every ${(gapMs / 1000).toFixed(2)} s over ${spreadMs / 1000} s (${describe(this.sessions)})`,
      );
      const startInTurn = async (p: PlannedSession, i: number) => {
        // Ctrl-C: the sessions not yet started are not started.
        const due = await sleep(i * gapMs, true, { signal }).catch(() => false);
        if (due) await this.#startOne(p);
      };
      await Promise.all(this.sessions.map(startInTurn));
    } else {
      progress(`starting ${count} sessions at once (${describe(this.sessions)})`);
      await Promise.all(this.sessions.map((p) => this.#startOne(p)));
    }
    progress(`${this.started.length} of ${count} sessions started in ${((Date.now() - at) / 1000).toFixed(1)} s`);
  }

  async #startOne(p: PlannedSession): Promise<void> {
    this.startTimes.push(Date.now());
    const id = await startSession(this.api, p, this.options.budgetMs);
    this.#ids[p.index] = id;
    if (id) this.started.push(id);
  }
}
