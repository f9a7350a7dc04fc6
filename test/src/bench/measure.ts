// Closed-loop load: `concurrency` workers each issue calls back to back for `durationMs`.
export interface Figures {
  readonly label: string;
  readonly concurrency: number;
  readonly calls: number;
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

async function run(concurrency: number, durationMs: number, call: () => Promise<unknown>): Promise<{ latencies: number[]; elapsed: number }> {
  const latencies: number[] = [];
  const end = performance.now() + durationMs;
  const worker = async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      await call();
      latencies.push(performance.now() - t0);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { latencies, elapsed: performance.now() - started };
}

function figures(label: string, concurrency: number, latencies: number[], elapsed: number): Figures {
  const sorted = Float64Array.from(latencies).sort();
  return {
    label,
    concurrency,
    calls: latencies.length,
    perSecond: latencies.length / (elapsed / 1000),
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
  };
}

export function printComparison(title: string, baseline: Figures, subject: Figures): void {
  const row = (f: Figures) =>
    `  ${f.label.padEnd(28)} ${String(f.concurrency).padStart(3)} in flight  ${f.perSecond.toFixed(0).padStart(7)} calls/s  p50 ${f.p50Ms.toFixed(3)} ms  p99 ${f.p99Ms.toFixed(3)} ms`;
  console.log(`${title}\n${row(baseline)}\n${row(subject)}\n  ratio ${(subject.perSecond / baseline.perSecond).toFixed(2)}\n`);
}

/**
 * Measures several variants side by side in alternating rounds (A B A B …), so that drift in
 * what else the machine is doing lands on every variant alike; figures pool all rounds.
 */
export async function compare(
  concurrency: number,
  durationMs: number,
  variants: readonly { readonly label: string; readonly call: () => Promise<unknown> }[],
  rounds = 4,
  /** Read before and after every round (e.g. CPU seconds of processes); deltas are summed per variant. */
  probe?: () => Promise<number[]>,
): Promise<ProbedFigures[]> {
  for (const v of variants) for (let i = 0; i < 200; i += 1) await v.call();
  const pooled = variants.map(() => ({ latencies: [] as number[], elapsed: 0, probed: [] as number[] }));
  for (let r = 0; r < rounds; r += 1) {
    for (const [i, v] of variants.entries()) {
      const before = (await probe?.()) ?? [];
      const { latencies, elapsed } = await run(concurrency, durationMs / rounds, v.call);
      const after = (await probe?.()) ?? [];
      const p = pooled[i]!;
      p.latencies.push(...latencies);
      p.elapsed += elapsed;
      after.forEach((value, k) => (p.probed[k] = (p.probed[k] ?? 0) + value - (before[k] ?? 0)));
    }
  }
  return variants.map((v, i) => ({ ...figures(v.label, concurrency, pooled[i]!.latencies, pooled[i]!.elapsed), probed: pooled[i]!.probed }));
}
