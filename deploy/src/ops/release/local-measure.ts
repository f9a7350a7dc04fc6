// The gate queries' answers computed from a set of pods' own /metrics pages, for the local release
// path, which needs no Prometheus: two readings of every new pod's page, the gate's observation
// window between them, give each unary method's calls, its server-fault ratio and its p95 (the
// same bucket interpolation as PromQL's histogram_quantile); a method is judged once it had
// minCallsToJudge calls in the window, its value the measure over its target, as in manifests/gate-queries.ts.
// Counters are read reset-aware, as increase() does; a pod restarted inside the window fails the gate
// (a gauge named like a counter, such as nodejs_active_handles_total, may fall: it is not read as a restart).
import { minCallsToJudge, parseMetrics, type Sample } from "@loopguard/tool-sdk";
import { type MethodSlo, SERVER_FAULT_CODES } from "../../manifests/slo-rules.js";
import type { GateAnswer, JudgedValue } from "./gate.js";

/** One reading of each pod's page, by pod. */
export type Reading = ReadonlyMap<string, readonly Sample[]>;

/** Reads every pod's page; a page that cannot be read fails the reading (a pod the gate cannot see is not judged healthy). */
export async function readPages(urls: ReadonlyMap<string, string>): Promise<Reading> {
  const pages = await Promise.all(
    [...urls].map(async ([pod, url]) => {
      const response = await fetch(url, { signal: AbortSignal.timeout(5000) }).catch((error: Error) => {
        throw new Error(`cannot read ${pod}'s metrics at ${url}: ${error.message}`);
      });
      if (!response.ok) throw new Error(`cannot read ${pod}'s metrics at ${url}: HTTP ${response.status}`);
      return [pod, parseMetrics(await response.text())] as const;
    }),
  );
  return new Map(pages);
}

/** A sample's series within its pod: its name and labels. */
function seriesKey(s: Sample): string {
  return `${s.name}${JSON.stringify(Object.entries(s.labels).sort(([a], [b]) => a.localeCompare(b)))}`;
}

/**
 * Whether a series only grows while its process lives: a counter, or a histogram's or summary's
 * bucket or count; on a page that declares no type, a name that says so by convention. Never a gauge,
 * whatever its name ends with (prom-client's nodejs_active_handles_total is one).
 */
function onlyGrows(s: Sample): boolean {
  if (s.type === "counter") return true;
  if (s.type === "histogram" || s.type === "summary") return /_(bucket|count)$/.test(s.name);
  return s.type === "untyped" && /_(total|bucket|count)$/.test(s.name);
}

/** The process's start time on the page (prom-client's default metrics), if it has one. */
function startTime(samples: readonly Sample[]): number | undefined {
  return samples.find((s) => s.name === "process_start_time_seconds")?.value;
}

/** A pod restarted inside the window, and what on its page says so. */
export interface Restart {
  readonly pod: string;
  readonly evidence: string;
}

/**
 * The pods restarted under the same name between the readings (docker's `--restart on-failure`), so
 * what they answered before the restart is in neither reading: their process started again, or a
 * series that only grows went back or is gone.
 */
export function restartedPods(before: Reading, after: Reading): Restart[] {
  return [...before].flatMap(([pod, samples]) => {
    const later = after.get(pod);
    if (!later) return [];
    const [startedThen, startedNow] = [startTime(samples), startTime(later)];
    if (startedThen !== startedNow)
      return [
        { pod, evidence: `its process start time went from ${startedThen ?? "absent"} to ${startedNow ?? "absent"}` },
      ];
    const now = new Map(later.map((s) => [seriesKey(s), s.value]));
    const back = samples.find((s) => onlyGrows(s) && !((now.get(seriesKey(s)) ?? -1) >= s.value));
    if (!back) return [];
    const value = now.get(seriesKey(back));
    const labels = Object.entries(back.labels).map(([k, v]) => `${k}="${v}"`);
    const series = `${back.name}{${labels.join(",")}}`;
    return [{ pod, evidence: `${series} went from ${back.value} to ${value ?? "absent"}` }];
  });
}

/**
 * The growth of every matching series from `before` to `after`, summed over pods, keyed by
 * `keyOf`; as PromQL's increase(), a counter lower than before was reset, and its growth is its
 * value since the reset (never negative).
 */
function growth(
  before: Reading,
  after: Reading,
  name: string,
  labels: Readonly<Record<string, string>>,
  keyOf: (s: Sample) => string,
): Map<string, number> {
  const sum = new Map<string, number>();
  for (const [pod, samples] of after) {
    const then = new Map((before.get(pod) ?? []).map((s) => [seriesKey(s), s.value]));
    for (const s of samples) {
      if (s.name !== name || !Object.entries(labels).every(([k, v]) => s.labels[k] === v)) continue;
      const was = then.get(seriesKey(s)) ?? 0;
      sum.set(keyOf(s), (sum.get(keyOf(s)) ?? 0) + (s.value >= was ? s.value - was : s.value));
    }
  }
  return sum;
}

/** PromQL's histogram_quantile over cumulative bucket counts by upper bound (with +Inf). */
export function bucketQuantile(q: number, buckets: ReadonlyMap<number, number>): number {
  const sorted = [...buckets].sort(([a], [b]) => a - b);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (sorted.length < 2 || sorted.at(-1)![0] !== Infinity || total <= 0) return Number.NaN;
  const rank = q * total;
  const index = sorted.findIndex(([, count]) => count >= rank);
  const [upper, count] = sorted[index]!;
  if (upper === Infinity) return sorted[index - 1]![0];
  const [lower, below] = index === 0 ? [0, 0] : sorted[index - 1]!;
  if (index === 0 && upper <= 0) return upper;
  return lower + (upper - lower) * ((rank - below) / (count - below));
}

/** The gate queries' answers over the window between two readings of the same pods. */
export function measureLocally(slos: readonly MethodSlo[], before: Reading, after: Reading): GateAnswer[] {
  const errors: JudgedValue[] = [];
  const p95s: JudgedValue[] = [];
  for (const slo of slos) {
    const scope = { grpc_service: slo.method.parent.typeName, grpc_method: slo.method.name };
    const byCode = growth(before, after, "grpc_server_handled_total", scope, (s) => s.labels.grpc_code ?? "");
    const calls = [...byCode.values()].reduce((a, b) => a + b, 0);
    if (calls < minCallsToJudge(slo.errorRateBudget)) continue;
    const faults = SERVER_FAULT_CODES.reduce((sum, code) => sum + (byCode.get(code) ?? 0), 0);
    const buckets = growth(before, after, "grpc_server_handling_seconds_bucket", scope, (s) => s.labels.le ?? "");
    const p95 = bucketQuantile(
      0.95,
      new Map([...buckets].map(([le, n]) => [le === "+Inf" ? Infinity : Number(le), n])),
    );
    errors.push({ method: slo.method.name, value: faults / calls / slo.errorRateBudget });
    p95s.push({ method: slo.method.name, value: p95 / (slo.p95TargetMs / 1000) });
  }
  // A new pod that crashed inside the window failed calls nobody can count now: that alone fails the gate.
  const problems = restartedPods(before, after).map(
    ({ pod, evidence }) =>
      `${pod} restarted during the gate's window (${evidence}): the calls it answered before are not counted, and a version whose pod crashes does not pass`,
  );
  return [
    { kind: "error-ratio", values: errors, ...(problems.length > 0 ? { problems } : {}) },
    { kind: "p95", values: p95s },
  ];
}
