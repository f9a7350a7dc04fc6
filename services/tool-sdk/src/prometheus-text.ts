// One reader of Prometheus' text format for every /metrics page loopguard reads (drills, release
// gates, patrols, tests). Hand-written because the published parsers merge a histogram's labelled
// series into one; this keeps every line as its own sample, histogram buckets included.

/** A metric family's type, from its `# TYPE` line; `untyped` when the page names none. */
export type MetricType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

export interface Sample {
  /** The series name as exposed, e.g. `grpc_server_handling_seconds_bucket`. */
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
  /** Its family's type: a name ending in `_total` says nothing (prom-client's `nodejs_active_handles_total` is a gauge). */
  readonly type: MetricType;
}

export type Labels = Readonly<Record<string, string>>;

const SAMPLE_LINE = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
const TYPE_LINE = /^#\s*TYPE\s+([a-zA-Z_:][\w:]*)\s+(counter|gauge|histogram|summary|untyped)\s*$/;
const FAMILY_SUFFIX = /_(bucket|count|sum)$/;
const ESCAPES: Readonly<Record<string, string>> = { n: "\n", "\\": "\\", '"': '"' };

function parseValue(text: string): number {
  if (text === "+Inf") return Number.POSITIVE_INFINITY;
  if (text === "-Inf") return Number.NEGATIVE_INFINITY;
  return Number(text);
}

/** The type of the family a series belongs to: its own name's, or (a histogram's or summary's part) its name's without the suffix. */
function typeOf(types: ReadonlyMap<string, MetricType>, name: string): MetricType {
  const own = types.get(name);
  if (own) return own;
  const family = types.get(name.replace(FAMILY_SUFFIX, ""));
  return family === "histogram" || family === "summary" ? family : "untyped";
}

/** Every sample line of a page, in order, typed by its family's `# TYPE` line; other comments and blank lines are skipped. */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  const types = new Map<string, MetricType>();
  for (const line of text.split("\n")) {
    const declared = TYPE_LINE.exec(line.trim());
    if (declared) types.set(declared[1]!, declared[2] as MetricType);
    if (line.startsWith("#")) continue;
    const match = SAMPLE_LINE.exec(line.trim());
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? "").matchAll(LABEL))
      labels[key!] = value!.replace(/\\(.)/g, (_, c: string) => ESCAPES[c] ?? c);
    samples.push({ name: match[1]!, labels, value: parseValue(match[3]!), type: typeOf(types, match[1]!) });
  }
  return samples;
}

/** The samples named `name` whose labels include `labels`. */
export function samplesOf(samples: readonly Sample[], name: string, labels: Labels = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** The sum of the samples' values. */
export function sumOf(samples: readonly Sample[]): number {
  return samples.reduce((sum, s) => sum + s.value, 0);
}

/** The sum of the samples of `name` whose labels include `labels`, read from a page or from its samples. */
export function metricValue(page: string | readonly Sample[], name: string, labels: Labels = {}): number {
  return sumOf(samplesOf(typeof page === "string" ? parseMetrics(page) : page, name, labels));
}
