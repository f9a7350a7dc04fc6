// Closed-loop load: `concurrency` workers each issue calls back to back for `durationMs`.
import { loadavg } from "node:os";

export interface Figures {
  readonly label: string;
  readonly concurrency: number;
  /** Every call completed, ramp and drain included: the divisor for per-call costs. */
  readonly calls: number;
  /** Calls per second in the steady windows (see RAMP_SHARE). */
  readonly perSecond: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

export interface ProbedFigures extends Figures {
  /** Per probe value, what it grew by over this variant's rounds. */
  readonly probed: number[];
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/**
 * Throughput is counted in the steady part of a round only: from RAMP_SHARE of its duration to its
 * end, while all `concurrency` workers are busy. At the start every worker sends at once, and
 * after the end the calls still in flight drain with fewer and fewer in flight; counting either
 * would measure something other than the stated concurrency (a 4-step session drains for as long
 * as four steps take, a bare call for one).
 */
const RAMP_SHARE = 0.1;

interface Round {
  /** Every completed call, for percentiles and per-call costs. */
  readonly latencies: number[];
  /** Calls completed inside the steady window, and its length. */
  readonly steadyCalls: number;
  readonly steadyMs: number;
}

async function run(concurrency: number, durationMs: number, call: () => Promise<unknown>): Promise<Round> {
  const latencies: number[] = [];
  const started = performance.now();
  const from = started + RAMP_SHARE * durationMs;
  const end = started + durationMs;
  let steadyCalls = 0;
  const worker = async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await call();
      const t1 = performance.now();
      latencies.push(t1 - t0);
      if (t1 >= from && t1 <= end) steadyCalls += 1;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { latencies, steadyCalls, steadyMs: end - from };
}

function figures(
  label: string,
  concurrency: number,
  latencies: number[],
  steadyCalls: number,
  steadyMs: number,
): Figures {
  const sorted = Float64Array.from(latencies).sort();
  return {
    label,
    concurrency,
    calls: latencies.length,
    perSecond: steadyCalls / (steadyMs / 1000),
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
  };
}

export function printComparison(title: string, baseline: Figures, subject: Figures): void {
  const row = (f: Figures) =>
    `  ${f.label.padEnd(28)} ${String(f.concurrency).padStart(3)} in flight  ${f.perSecond.toFixed(0).padStart(7)} calls/s  p50 ${f.p50Ms.toFixed(3)} ms  p99 ${f.p99Ms.toFixed(3)} ms`;
  console.log(
    `${title}\n${row(baseline)}\n${row(subject)}\n  ratio ${(subject.perSecond / baseline.perSecond).toFixed(2)}\n`,
  );
}

export interface CompareOptions {
  readonly rounds?: number;
  /** Read before and after every round (e.g. CPU seconds of processes); deltas are summed per variant. */
  readonly probe?: () => Promise<number[]>;
  /**
   * How long each variant runs at full concurrency before the measured rounds. A cold process
   * runs its path several times slower until V8 has optimised it (for an orchestrator, the first
   * seconds of load), which is not the steady state a long-running service is in.
   */
  readonly warmUpMs?: number;
  /** Calls made one at a time before the warm-up at full concurrency (default 200). */
  readonly warmUpCalls?: number;
}

/**
 * Measures several variants side by side in alternating rounds (A B A B …), so that drift in
 * what else the machine is doing lands on every variant alike; figures pool all rounds.
 */
export async function compare(
  concurrency: number,
  durationMs: number,
  variants: readonly { readonly label: string; readonly call: () => Promise<unknown> }[],
  { rounds = 4, probe, warmUpMs = 500, warmUpCalls = 200 }: CompareOptions = {},
): Promise<ProbedFigures[]> {
  for (const v of variants) {
    for (let i = 0; i < warmUpCalls; i += 1) await v.call();
    await run(concurrency, warmUpMs, v.call);
  }
  const pooled = variants.map(() => ({
    latencies: [] as number[],
    steadyCalls: 0,
    steadyMs: 0,
    probed: [] as number[],
  }));
  for (let r = 0; r < rounds; r += 1) {
    for (const [i, v] of variants.entries()) {
      const before = (await probe?.()) ?? [];
      const round = await run(concurrency, durationMs / rounds, v.call);
      const after = (await probe?.()) ?? [];
      const p = pooled[i]!;
      p.latencies.push(...round.latencies);
      p.steadyCalls += round.steadyCalls;
      p.steadyMs += round.steadyMs;
      for (const [k, value] of after.entries()) p.probed[k] = (p.probed[k] ?? 0) + value - (before[k] ?? 0);
    }
  }
  return variants.map((v, i) => ({
    ...figures(v.label, concurrency, pooled[i]!.latencies, pooled[i]!.steadyCalls, pooled[i]!.steadyMs),
    probed: pooled[i]!.probed,
  }));
}

/** The 1, 5 and 15 minute load averages, for a figure's context (2 cores: above ~2, processes wait for a core). */
export function loadAverage(): string {
  return loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
}
