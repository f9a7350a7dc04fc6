// Latency of the orchestrator's hottest write: one optimistic-lock transition plus its audit
// row, issued back to back on one session the way a single session loop issues them.
import { randomUUID } from "node:crypto";
import type { SessionState, SessionStore } from "@loopguard/orchestrator";

export interface TransitionBenchResult {
  readonly n: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly perSecond: number;
}

/** THINKING -> TOOL_EXECUTING -> OBSERVING -> THINKING …: the loop a tool-using session runs. */
const CYCLE: readonly SessionState[] = ["THINKING", "TOOL_EXECUTING", "OBSERVING"];

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;
}

export async function benchTransitions(store: SessionStore, n: number): Promise<TransitionBenchResult> {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`n must be a positive integer, got ${n}`);
  const { session } = await store.create({
    id: `bench-${randomUUID()}`,
    goal: "benchmark transitions",
    task: { kind: "bench" },
    budget: { maxSteps: n, maxToolCalls: n, maxTokens: 0, maxCostMicros: 0, deadlineMs: 3_600_000 },
    scopes: [],
    policy: "scripted",
    createdBy: "bench",
  });
  let current = session;
  const samplesUs: number[] = new Array<number>(n);
  const started = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const to: SessionState = CYCLE[i % CYCLE.length] ?? "THINKING";
    const t0 = process.hrtime.bigint();
    // As the session runner does: the record it moves from goes along.
    current = await store.transition({
      id: session.id,
      from: current.state,
      to,
      expectedVersion: current.version,
      current,
      audit: { at: Date.now(), reason: "bench", tool: to === "TOOL_EXECUTING" ? "billing.refund" : undefined },
    });
    samplesUs[i] = Number(process.hrtime.bigint() - t0) / 1_000;
  }
  const elapsedS = Number(process.hrtime.bigint() - started) / 1e9;
  const sorted = samplesUs.sort((a, b) => a - b);
  return {
    n,
    p50Us: Math.round(percentile(sorted, 50) * 10) / 10,
    p99Us: Math.round(percentile(sorted, 99) * 10) / 10,
    perSecond: Math.round(n / elapsedS),
  };
}
