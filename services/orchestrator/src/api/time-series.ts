// The dashboard's plots: this process samples its own figures every ORCHESTRATOR_SERIES_INTERVAL_MS
// into a ring of the last hour (bounded: one hour's samples, at most MAX_SAMPLES), since the local
// suite has no Prometheus to ask. Each sample holds sessions by state (the store's counts), each
// tool's p95 latency and error ratio over the interval it closes (differences of the tool clients'
// own cumulative metrics), and the patrol's last success ratio when its gauge is there.
import type { DescService } from "@bufbuild/protobuf";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { GetTimeSeriesResponseSchema } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { ToolClient } from "@loopguard/tool-sdk";
import type { Registry } from "prom-client";
import { SESSION_STATES, type SessionState } from "../session/session-state.js";
import { Periodic } from "../governance/periodic.js";
import type { SessionStore } from "../store/session-store.js";
import { type Buckets, errorRatioOf, msOf, quantileOf, toolCounters } from "./tool-stats.js";

/** The gauge the patrol's runs set (0..1, the last run); absent until a patrol reports. */
export const PATROL_GAUGE = "loopguard_patrol_success_ratio";
const WINDOW_MS = 3600_000;
const MAX_SAMPLES = 3600;

export interface TimeSeriesOptions {
  readonly store: Pick<SessionStore, "countByState">;
  /** The registry the tool clients' metrics (and the patrol's gauge) live in. */
  readonly registry: Registry;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  readonly intervalMs: number;
  readonly now: () => number;
}

interface ToolSample {
  readonly p95Ms: number | null;
  readonly errorRatio: number | null;
}

interface Sample {
  readonly at: number;
  readonly states: Readonly<Record<SessionState, number>>;
  readonly tools: ReadonlyMap<string, ToolSample>;
  readonly patrol: number | null;
}

/** `now` minus `before`, bucket by bucket (both cumulative). */
function difference(now: Buckets, before: Buckets | undefined): Buckets {
  return new Map([...now].map(([le, n]) => [le, n - (before?.get(le) ?? 0)]));
}

function outcomesSince(
  now: Readonly<Record<string, number>>,
  before: Readonly<Record<string, number>> | undefined,
): Record<string, number> {
  return Object.fromEntries(Object.entries(now).map(([outcome, n]) => [outcome, n - (before?.[outcome] ?? 0)]));
}

const optional = (value: number | null) => (value === null ? {} : { value });

export class TimeSeries extends Periodic<void> {
  readonly #capacity: number;
  readonly #samples: Sample[] = [];
  /** Each tool's cumulative figures at the last sample, to take the next one's differences from. */
  #previous = new Map<string, { buckets: Buckets; outcomes: Record<string, number> }>();

  constructor(private readonly options: TimeSeriesOptions) {
    super(options.intervalMs);
    this.#capacity = Math.min(MAX_SAMPLES, Math.ceil(WINDOW_MS / options.intervalMs));
  }

  /** Takes one sample. */
  protected async task(): Promise<void> {
    const { store, registry, clients } = this.options;
    // A store that cannot answer leaves the last counts in place, as loopguard_sessions does.
    const last = this.#samples.at(-1);
    const [states, counters, patrol] = await Promise.all([
      store.countByState().catch(() => last?.states ?? null),
      toolCounters(registry, clients),
      registry.getSingleMetric(PATROL_GAUGE)?.get(),
    ]);
    const tools = new Map<string, ToolSample>();
    const previous = new Map<string, { buckets: Buckets; outcomes: Record<string, number> }>();
    for (const c of counters) {
      const before = this.#previous.get(c.tool);
      tools.set(c.tool, {
        p95Ms: msOf(quantileOf(difference(c.buckets, before?.buckets), 0.95)),
        errorRatio: errorRatioOf(outcomesSince(c.outcomes, before?.outcomes)),
      });
      previous.set(c.tool, { buckets: new Map(c.buckets), outcomes: { ...c.outcomes } });
    }
    this.#previous = previous;
    const value = patrol?.values[0]?.value;
    this.#samples.push({
      at: this.options.now(),
      states: states ?? (Object.fromEntries(SESSION_STATES.map((s) => [s, 0])) as Record<SessionState, number>),
      tools,
      patrol: typeof value === "number" && Number.isFinite(value) ? value : null,
    });
    if (this.#samples.length > this.#capacity) this.#samples.splice(0, this.#samples.length - this.#capacity);
  }

  /**
   * The series as the dashboard plots them. Sessions by state count every session of the store,
   * so they go only to a viewer who may see every session (sessions:admin); others get the tools'
   * and the patrol's series, which hold no session.
   */
  response(seesAllSessions: boolean): MessageInitShape<typeof GetTimeSeriesResponseSchema> {
    const samples = this.#samples;
    const tools = [...this.options.clients.values()].map((c) => c.tool);
    return {
      at: samples.map((s) => timestampFromMs(s.at)),
      sessions: seesAllSessions
        ? SESSION_STATES.map((state) => ({ state, counts: samples.map((s) => s.states[state]) }))
        : [],
      tools: tools.map((tool) => ({
        tool,
        p95Ms: samples.map((s) => optional(s.tools.get(tool)?.p95Ms ?? null)),
        errorRatio: samples.map((s) => optional(s.tools.get(tool)?.errorRatio ?? null)),
      })),
      patrolSuccessRatio: samples.map((s) => optional(s.patrol)),
      intervalMs: this.options.intervalMs,
    };
  }
}
