// One reader of Prometheus' text format for every /metrics page loopguard reads (drills, release
// gates, patrols, tests). Hand-written because the published parsers merge a histogram's labelled
// series into one; this keeps every line as its own sample, histogram buckets included.

export interface Sample {
  /** The series name as exposed, e.g. `grpc_server_handling_seconds_bucket`. */
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export type Labels = Readonly<Record<string, string>>;

const SAMPLE_LINE = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"/g;
const ESCAPES: Readonly<Record<string, string>> = { n: "\n", "\\": "\\", '"': '"' };

function parseValue(text: string): number {
  if (text === "+Inf") return Number.POSITIVE_INFINITY;
  if (text === "-Inf") return Number.NEGATIVE_INFINITY;
  return Number(text);
}

/** Every sample line of a page, in order; comments (# HELP, # TYPE) and blank lines are skipped. */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const match = SAMPLE_LINE.exec(line.trim());
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? "").matchAll(LABEL))
      labels[key!] = value!.replace(/\\(.)/g, (_, c: string) => ESCAPES[c] ?? c);
    samples.push({ name: match[1]!, labels, value: parseValue(match[3]!) });
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
