// The dashboard's tool table: per tool, since this process started, latency quantiles and
// outcomes read back from the tool clients' own Prometheus metrics, and the degraded answers the
// host gave sessions in the tool's place from the sessions' metrics.
import type { DescService } from "@bufbuild/protobuf";
import type { ToolClient } from "@loopguard/tool-sdk";
import type { Registry } from "prom-client";
import { ToolRegistry } from "../tool-registry.js";

export type Buckets = Map<number, number>;

/** Prometheus' histogram_quantile over cumulative buckets: linear inside the bucket holding the rank. */
export function quantileOf(buckets: Buckets, q: number): number | null {
  const bounds = [...buckets.keys()].sort((a, b) => a - b);
  const total = buckets.get(Number.POSITIVE_INFINITY) ?? 0;
  if (total === 0) return null;
  const rank = q * total;
  let previousBound = 0;
  let previousCount = 0;
  for (const bound of bounds) {
    const count = buckets.get(bound) ?? 0;
    if (count >= rank) {
      if (!Number.isFinite(bound)) return previousBound;
      if (count === previousCount) return bound;
      return previousBound + (bound - previousBound) * ((rank - previousCount) / (count - previousCount));
    }
    previousBound = bound;
    previousCount = count;
  }
  return previousBound;
}

export interface ToolStats {
  readonly tool: string;
  readonly service: string;
  readonly breaker: string;
  readonly calls: number;
  readonly p50Ms: number | null;
  readonly p95Ms: number | null;
  /** Share of calls the tool did not answer live (errors, fallbacks, rejections). */
  readonly errorRate: number;
  /** Answers from the cache or the degraded answer, the client's and the host's. */
  readonly fallbacksServed: number;
  readonly outcomes: Record<string, number>;
}

type MetricValues = { value: number; labels: Record<string, string | number | undefined>; metricName?: string }[];

async function valuesOf(registry: Registry, name: string): Promise<MetricValues> {
  const metric = registry.getSingleMetric(name);
  return metric ? ((await metric.get()).values as MetricValues) : [];
}

/** One tool's cumulative figures since this process started, as its client's metrics hold them. */
export interface ToolCounters {
  readonly tool: string;
  readonly service: string;
  readonly breaker: string;
  /** Cumulative latency buckets in seconds (upper bound → calls), +Inf holding every call. */
  readonly buckets: Buckets;
  /** Calls by outcome, e.g. "ok", "fallback_cache". */
  readonly outcomes: Record<string, number>;
  /** Degraded answers the host gave sessions itself when the tool stayed down (session/park.ts). */
  readonly hostDegraded: number;
}

/** Per set of clients: the tool of each model-visible name its sessions' metrics are labelled with. */
const toolsByName = new WeakMap<ReadonlyMap<string, ToolClient<DescService>>, ReadonlyMap<string, string>>();

function toolOfName(clients: ReadonlyMap<string, ToolClient<DescService>>): ReadonlyMap<string, string> {
  let names = toolsByName.get(clients);
  if (!names) {
    const registry = new ToolRegistry([...clients.values()].map((c) => c.service));
    names = new Map(registry.list().map((t) => [t.name, t.tool]));
    toolsByName.set(clients, names);
  }
  return names;
}

/**
 * Per tool, since this process started: latency from grpc_client_handling_seconds, outcomes from
 * loopguard_tool_client_calls_total, the host's degraded answers from
 * loopguard_session_tool_results_total{served_from="degraded"}.
 */
export async function toolCounters(
  registry: Registry,
  clients: ReadonlyMap<string, ToolClient<DescService>>,
): Promise<ToolCounters[]> {
  const [latency, calls, results] = await Promise.all([
    valuesOf(registry, "grpc_client_handling_seconds"),
    valuesOf(registry, "loopguard_tool_client_calls_total"),
    valuesOf(registry, "loopguard_session_tool_results_total"),
  ]);
  const bucketsByService = new Map<string, Buckets>();
  for (const v of latency) {
    if (v.metricName !== "grpc_client_handling_seconds_bucket") continue;
    const service = String(v.labels.grpc_service);
    const le = v.labels.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(v.labels.le);
    const buckets = bucketsByService.get(service) ?? new Map<number, number>();
    buckets.set(le, (buckets.get(le) ?? 0) + v.value);
    bucketsByService.set(service, buckets);
  }
  const outcomesByTool = new Map<string, Record<string, number>>();
  for (const v of calls) {
    // A series at 0 is there for the alerts' increase() (callMetricsStage), not a call made.
    if (v.value === 0) continue;
    const tool = String(v.labels.tool);
    const outcome = String(v.labels.outcome);
    const outcomes = outcomesByTool.get(tool) ?? {};
    outcomes[outcome] = (outcomes[outcome] ?? 0) + v.value;
    outcomesByTool.set(tool, outcomes);
  }
  // Sessions call their tools with degraded: false (session/send.ts), so a degraded answer a
  // session observed is the host's and never also a client's fallback_degraded; cached answers
  // are the client's, counted in its outcomes already.
  const names = toolOfName(clients);
  const degradedByTool = new Map<string, number>();
  for (const v of results) {
    const tool = v.labels.served_from === "degraded" ? names.get(String(v.labels.tool)) : undefined;
    if (tool !== undefined) degradedByTool.set(tool, (degradedByTool.get(tool) ?? 0) + v.value);
  }
  return [...clients.values()].map((client) => ({
    tool: client.tool,
    service: client.service.typeName,
    breaker: client.breakerState,
    buckets: bucketsByService.get(client.service.typeName) ?? new Map<number, number>(),
    outcomes: outcomesByTool.get(client.tool) ?? {},
    hostDegraded: degradedByTool.get(client.tool) ?? 0,
  }));
}

/** Milliseconds, to a tenth, from seconds. */
export const msOf = (seconds: number | null): number | null =>
  seconds === null ? null : Math.round(seconds * 10_000) / 10;

/** Share of `outcomes` the tool did not answer live; null without calls. */
export function errorRatioOf(outcomes: Readonly<Record<string, number>>): number | null {
  const total = Object.values(outcomes).reduce((a, b) => a + b, 0);
  return total === 0 ? null : (total - (outcomes.ok ?? 0)) / total;
}

/** Per tool, since this process started. */
export async function toolStats(
  registry: Registry,
  clients: ReadonlyMap<string, ToolClient<DescService>>,
): Promise<ToolStats[]> {
  return (await toolCounters(registry, clients)).map(({ tool, service, breaker, buckets, outcomes, hostDegraded }) => ({
    tool,
    service,
    breaker,
    calls: Object.values(outcomes).reduce((a, b) => a + b, 0),
    p50Ms: msOf(quantileOf(buckets, 0.5)),
    p95Ms: msOf(quantileOf(buckets, 0.95)),
    errorRate: errorRatioOf(outcomes) ?? 0,
    fallbacksServed: (outcomes.fallback_cache ?? 0) + (outcomes.fallback_degraded ?? 0) + hostDegraded,
    outcomes,
  }));
}
