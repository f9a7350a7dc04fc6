// The orchestrators' Prometheus pages, sampled during a drill: what the policies offered each
// tool, what reached it, what fell back, what failed, and its breaker's moves. Counters are read
// as differences between two snapshots; a replica that died keeps its last page, so its counts up
// to the moment it was last sampled (the runner samples right before every kill) still add up.
import { parseMetrics, type Sample, samplesOf, sumOf } from "@loopguard/tool-sdk";
import { DrillError } from "./drill-error.js";

/** Pages by pod name at one moment. */
export interface Snapshot {
  readonly at: number;
  readonly pages: ReadonlyMap<string, readonly Sample[]>;
}

/** The sum over every pod of the samples of `name` whose labels include `labels`. */
export function total(snapshot: Snapshot, name: string, labels: Readonly<Record<string, string>> = {}): number {
  let sum = 0;
  for (const samples of snapshot.pages.values()) sum += sumOf(samplesOf(samples, name, labels));
  return sum;
}

/** Counter growth from `from` to `to`. */
export function growth(
  from: Snapshot,
  to: Snapshot,
  name: string,
  labels: Readonly<Record<string, string>> = {},
): number {
  return total(to, name, labels) - total(from, name, labels);
}

export const FALLBACK_OUTCOMES = ["fallback_cache", "fallback_degraded"] as const;

/**
 * Whether a call of this loopguard_tool_client_calls_total outcome failed for the session: every
 * outcome but an answer, the tool's (ok) or a fallback's. So error, the client's refusals
 * (breaker_rejected, bulkhead_rejected, client_invalid, answer_too_large) and any refusal the
 * client names later all count, without a list here to fall behind it.
 */
export function failedOutcome(outcome: string): boolean {
  return outcome !== "ok" && !(FALLBACK_OUTCOMES as readonly string[]).includes(outcome);
}

export interface ToolCallFigures {
  /** Calls the sessions' policies sent to the tool (one per call, whatever its retries). */
  readonly offered: number;
  /** RPC attempts the client put on the wire, retries included. */
  readonly attempts: number;
  /** Answers from the client's cache or degraded answer, and the host's degraded answers. */
  readonly fallbacks: number;
  readonly failed: number;
  /** The client's failed calls by "outcome code", e.g. "error DEADLINE_EXCEEDED" (also those the host then answered degraded). */
  readonly failures: Readonly<Record<string, number>>;
}

/**
 * `grpcService`: the tool's protobuf service name, the label of the standard gRPC client metrics;
 * `names`: its methods' model-visible names (kb_search_search), under which sessions count the
 * degraded answers the host gives itself when the tool stays down (session/park.ts). Sessions call
 * with degraded: false, so the client counts each of those calls as failed: they are fallbacks
 * served, as ToolFallbacksServedHigh counts them, not calls that got no answer.
 */
export function toolCallFigures(
  from: Snapshot,
  to: Snapshot,
  tool: string,
  grpcService: string,
  names: readonly string[] = [],
): ToolCallFigures {
  const calls = (outcome: string) => growth(from, to, "loopguard_tool_client_calls_total", { tool, outcome });
  const failures: Record<string, number> = {};
  const kinds = new Set<string>();
  for (const samples of to.pages.values()) {
    for (const s of samples) {
      if (
        s.name === "loopguard_tool_client_calls_total" &&
        s.labels.tool === tool &&
        failedOutcome(s.labels.outcome ?? "")
      )
        kinds.add(`${s.labels.outcome} ${s.labels.grpc_code}`);
    }
  }
  for (const kind of kinds) {
    const [outcome, grpcCode] = kind.split(" ") as [string, string];
    const n = growth(from, to, "loopguard_tool_client_calls_total", { tool, outcome, grpc_code: grpcCode });
    if (n > 0) failures[kind] = n;
  }
  const offered = growth(from, to, "loopguard_tool_client_calls_total", { tool });
  const hostDegraded = names.reduce(
    (sum, name) =>
      sum + growth(from, to, "loopguard_session_tool_results_total", { tool: name, served_from: "degraded" }),
    0,
  );
  const fallbacks = FALLBACK_OUTCOMES.reduce((sum, o) => sum + calls(o), hostDegraded);
  return {
    offered,
    attempts: growth(from, to, "grpc_client_handled_total", { grpc_service: grpcService }),
    fallbacks,
    failed: offered - calls("ok") - fallbacks,
    failures,
  };
}

/** Breaker transitions of one tool, by the state entered. */
export function breakerTransitions(from: Snapshot, to: Snapshot, tool: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const state of ["open", "half-open", "closed"]) {
    const n = growth(from, to, "loopguard_tool_breaker_transitions_total", { tool, state });
    if (n > 0) out[state] = n;
  }
  return out;
}

/** Pages by pod name, read now; a read that reaches no page, or only some, throws (PartialRead). */
export type PageReader = () => Promise<ReadonlyMap<string, readonly Sample[]>>;

/** A read that reached some of the pods' pages, not all: what it read, and why the others are missing. */
export class PartialRead extends Error {
  override readonly name = "PartialRead";
  constructor(
    readonly pages: ReadonlyMap<string, readonly Sample[]>,
    message: string,
  ) {
    super(message);
  }
}

/** Reads each pod's own /metrics page (pod name → URL), in parallel, 2 s each; every pod must answer. */
export function podPages(urls: () => ReadonlyMap<string, string> | Promise<ReadonlyMap<string, string>>): PageReader {
  return async () => {
    const pods = [...(await urls())];
    if (pods.length === 0) throw new Error("no orchestrator pod to read /metrics from");
    const pages = new Map<string, readonly Sample[]>();
    const missing: string[] = [];
    await Promise.all(
      pods.map(async ([pod, url]) => {
        try {
          const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
          if (!response.ok) throw new Error(`HTTP ${response.status}`);
          pages.set(pod, parseMetrics(await response.text()));
        } catch (error) {
          missing.push(`${pod} (${url}): ${(error as Error).message}`);
        }
      }),
    );
    if (missing.length > 0)
      throw new PartialRead(pages, `read ${pages.size} of ${pods.length} orchestrator pages; ${missing.join("; ")}`);
    return pages;
  };
}

/**
 * Samples the pages of a set of pods, keeping each pod's last good page: a pod that stops
 * answering (killed) keeps counting with what it had said last.
 */
export class MetricsSampler {
  readonly #last = new Map<string, readonly Sample[]>();
  #read = false;

  constructor(private readonly read: PageReader) {}

  /**
   * A read that fails once the run is under way (Prometheus busy, the API server slow, a killed
   * replica) leaves the last pages standing, and takes those it did read; a first read that fails,
   * reaches no page or misses a replica says the run cannot measure, and throws: figures summed
   * over no page would read as a clean run.
   */
  async sample(): Promise<Snapshot> {
    let pages: ReadonlyMap<string, readonly Sample[]>;
    try {
      pages = await this.read();
      if (pages.size === 0) throw new Error("no orchestrator page was read");
    } catch (error) {
      if (!this.#read)
        throw new DrillError(`the drill cannot measure the orchestrators' figures: ${(error as Error).message}`);
      pages = error instanceof PartialRead ? error.pages : new Map();
    }
    for (const [pod, page] of pages) this.#last.set(pod, page);
    this.#read = true;
    return { at: Date.now(), pages: new Map(this.#last) };
  }
}

/** The counters the report reads off the orchestrators' pages. */
export const REPORT_METRICS = [
  "loopguard_tool_client_calls_total",
  "grpc_client_handled_total",
  "loopguard_tool_breaker_transitions_total",
  "loopguard_session_transitions_total",
] as const;

interface PromVector {
  readonly status: string;
  readonly error?: string;
  readonly data?: {
    readonly result: readonly { readonly metric: Record<string, string>; readonly value: readonly [number, string] }[];
  };
}

/**
 * The same pages from a Prometheus that scrapes them (prometheus-operator's ServiceMonitor labels
 * each series with its `pod`): one instant query for REPORT_METRICS of `job` in `namespace`, split
 * by pod. Figures are as fresh as the last scrape (15 s), not the moment of the sample.
 */
export function prometheusPages(baseUrl: string, namespace: string, job: string): PageReader {
  const query = `{__name__=~"${REPORT_METRICS.join("|")}",namespace="${namespace}",job="${job}"}`;
  return async () => {
    const response = await fetch(`${baseUrl}/api/v1/query?query=${encodeURIComponent(query)}`, {
      signal: AbortSignal.timeout(5000),
    });
    const body = (await response.json()) as PromVector;
    if (body.status !== "success" || !body.data)
      throw new Error(`Prometheus at ${baseUrl} answered ${response.status}: ${body.error ?? body.status}`);
    // An empty answer (the job or a metric renamed, the ServiceMonitor gone) is no figure, not zero.
    if (body.data.result.length === 0)
      throw new Error(`Prometheus at ${baseUrl} has no series of job "${job}" in namespace "${namespace}": ${query}`);
    const pages = new Map<string, Sample[]>();
    for (const { metric, value } of body.data.result) {
      const { __name__: name, ...labels } = metric;
      const pod = labels.pod ?? labels.instance ?? "";
      // A query's answer carries no family type.
      pages.set(pod, [...(pages.get(pod) ?? []), { name: name!, labels, value: Number(value[1]), type: "untyped" }]);
    }
    return pages;
  };
}
