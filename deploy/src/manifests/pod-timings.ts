// How long a pod of the suite may take to start and to stop, from measured figures rather than
// round numbers. deploy/test/pod-timings.int.test.ts starts every service as a process and fails
// when a figure here understates what it measures.
import type { ServiceSpec } from "@loopguard/tool-sdk";

/**
 * Measured (2026-12-01, the 2-core CI machine kind, load average 12): CPU a process spends from
 * spawn until it serves — loading its modules, opening its store, kb-search seeding its index on
 * an empty emptyDir — 2.0–2.6 s for a tool, 2.9–3.0 s for the orchestrator; wall time 5–9 s on
 * that loaded machine. The orchestrator's grew to 3.54 s (2026-12-02, a quiet CI run) with the
 * context governance's modules; 3.78–3.80 s, and billing's 2.81–3.03 s (2026-12-08, a CI run and a
 * quiet machine). The figures keep about 15 % above the highest. A SIGTERM with spans
 * waiting for a collector that never answers: the drain ends at once, then the exporter gives up
 * after OTEL_EXPORTER_OTLP_TIMEOUT (5 s, set in the base's loopguard-telemetry): 5.1–5.3 s.
 */
export const POD_TIMINGS = {
  startCpuSeconds: { tool: 3.5, orchestrator: 4.4 },
  flushSeconds: 6,
} as const;

/** The CPU requests: what a busy node still guarantees the pod. */
export const CPU_REQUEST_MILLICORES = { tool: 100, orchestrator: 250 } as const;

export function cpuRequestCores(spec: Pick<ServiceSpec, "kind">): number {
  return CPU_REQUEST_MILLICORES[spec.kind] / 1000;
}

export const STARTUP_PERIOD_SECONDS = 2;

/** Twice the start's CPU run at the pod's request: a start on a node busy to its requests fits. */
export function startupBudgetSeconds(spec: Pick<ServiceSpec, "kind">): number {
  const budget = (2 * POD_TIMINGS.startCpuSeconds[spec.kind]) / cpuRequestCores(spec);
  return Math.ceil(budget / STARTUP_PERIOD_SECONDS) * STARTUP_PERIOD_SECONDS;
}

/** The drain a service is given on SIGTERM (<PREFIX>_SHUTDOWN_GRACE_MS). */
export const SHUTDOWN_GRACE_MS = 10_000;
/** Time for the endpoints and DNS of a terminating pod to be withdrawn before it gets SIGTERM. */
export const PRE_STOP_SECONDS = 5;
/**
 * preStop, then the drain: up to the grace for calls in flight, then up to the grace again for
 * the server to close (tool-sdk's shutdown), then the telemetry flush, and a margin before SIGKILL.
 */
export const TERMINATION_GRACE_SECONDS =
  PRE_STOP_SECONDS + (2 * SHUTDOWN_GRACE_MS) / 1000 + POD_TIMINGS.flushSeconds + 4;
