// The liveness probe a kubelet runs, for a local child: grpc.health.v1 Check every period, each
// bounded by a timeout, and only a run of failures in a row counts, so one slow moment (a long GC,
// a busy machine) is not a kill. A check answers in microseconds when the event loop runs, so a
// run of them timing out means a process frozen, blocked or deadlocked. One connection serves all of
// a process's checks, where a kubelet dials each time: a check every few seconds need not cost one.
import { setTimeout as sleep } from "node:timers/promises";
import { healthChecker, integerSetting } from "@loopguard/tool-sdk";

export interface LivenessProbe {
  readonly periodMs: number;
  readonly timeoutMs: number;
  /** Failed checks in a row that mean the process is not alive. */
  readonly failureThreshold: number;
}

/**
 * The clusters' livenessProbe (deploy's service manifests: every 10 s, a 5 s timeout, 3 failures), so
 * a service frozen under `pnpm start` is killed after about 30 s, as in a pod, and no sooner: a busy
 * laptop stalls an event loop more often than a node does.
 */
export const LIVENESS_DEFAULTS: LivenessProbe = { periodMs: 10_000, timeoutMs: 5_000, failureThreshold: 3 };

/**
 * The probe `pnpm start` runs, from LOOPGUARD_LIVENESS_PERIOD_MS, _TIMEOUT_MS and _FAILURES (the
 * defaults above when unset). _FAILURES=0 turns it off: a service paused in a debugger would
 * otherwise be killed as frozen. A bad value is a ConfigError naming the variable.
 */
export function livenessSettings(env: Readonly<Record<string, string | undefined>>): LivenessProbe {
  return {
    periodMs: integerSetting(env, "LOOPGUARD_LIVENESS_PERIOD_MS", {
      min: 100,
      max: 3_600_000,
      default: LIVENESS_DEFAULTS.periodMs,
    }),
    timeoutMs: integerSetting(env, "LOOPGUARD_LIVENESS_TIMEOUT_MS", {
      min: 100,
      max: 600_000,
      default: LIVENESS_DEFAULTS.timeoutMs,
    }),
    failureThreshold: integerSetting(env, "LOOPGUARD_LIVENESS_FAILURES", {
      min: 0,
      max: 100,
      default: LIVENESS_DEFAULTS.failureThreshold,
    }),
  };
}

export interface LivenessReport {
  failed(failures: number, error: string): void;
  recovered(failures: number): void;
}

/**
 * Checks the server at `address` every period until `signal` aborts (resolves undefined) or
 * `failureThreshold` checks in a row have failed (resolves the last one's error).
 */
export async function watchLiveness(
  address: string,
  probe: LivenessProbe,
  signal: AbortSignal,
  report: LivenessReport,
): Promise<string | undefined> {
  const checker = healthChecker(address);
  let failures = 0;
  try {
    for (;;) {
      try {
        await sleep(probe.periodMs, undefined, { signal });
      } catch {
        return undefined;
      }
      const error = await checker.check(probe.timeoutMs).then(
        (status) => (status === "SERVING" ? undefined : `answered ${status}`),
        (failure: Error) => failure.message,
      );
      if (signal.aborted) return undefined;
      if (error === undefined) {
        if (failures > 0) report.recovered(failures);
        failures = 0;
        continue;
      }
      failures += 1;
      report.failed(failures, error);
      if (failures >= probe.failureThreshold) return error;
    }
  } finally {
    checker.close();
  }
}
