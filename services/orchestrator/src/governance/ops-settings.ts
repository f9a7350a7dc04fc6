// The governance settings from the environment: trace files' retention, step-row retention and
// the dashboard's sampled series (ORCHESTRATOR_TRACE_*, ORCHESTRATOR_STEP_*, ORCHESTRATOR_SERIES_*).
import { ConfigError, integerSetting } from "@loopguard/tool-sdk";
import { sessionSampleRatio } from "../session/sampling.js";
import { DEFAULT_TRACE_RETENTION, type TraceRetention } from "./trace-files.js";

type Env = Readonly<Record<string, string | undefined>>;

const GIB = 1024 ** 3;
const HOUR_MS = 3600_000;

/** The trace files' limits; the total must hold the open file and at least one rolled one. */
export function traceRetention(env: Env): TraceRetention {
  const defaults = DEFAULT_TRACE_RETENTION;
  const fileBytes = integerSetting(env, "ORCHESTRATOR_TRACE_FILE_BYTES", {
    default: defaults.fileBytes,
    min: 4096,
    max: GIB,
  });
  const totalBytes = integerSetting(env, "ORCHESTRATOR_TRACE_TOTAL_BYTES", {
    default: defaults.totalBytes,
    min: 8192,
    max: 64 * GIB,
  });
  const maxAgeHours = integerSetting(env, "ORCHESTRATOR_TRACE_MAX_AGE_HOURS", {
    default: defaults.maxAgeMs / HOUR_MS,
    min: 1,
    max: 366 * 24,
  });
  if (totalBytes < 2 * fileBytes) {
    throw new ConfigError(
      `ORCHESTRATOR_TRACE_TOTAL_BYTES (${totalBytes}) must be at least twice ORCHESTRATOR_TRACE_FILE_BYTES (${fileBytes})`,
    );
  }
  return Object.freeze({ fileBytes, totalBytes, maxAgeMs: maxAgeHours * HOUR_MS });
}

export interface OpsSettings {
  readonly stepRetentionDays: number;
  readonly stepRetentionIntervalMs: number;
  readonly seriesIntervalMs: number;
  /** The ratio of ordinary sessions whose traces are kept (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; see session/sampling.ts). */
  readonly traceSampleRatio: number;
}

export function opsSettings(env: Env): OpsSettings {
  return Object.freeze({
    stepRetentionDays: integerSetting(env, "ORCHESTRATOR_STEP_RETENTION_DAYS", { default: 30, min: 1, max: 3660 }),
    stepRetentionIntervalMs:
      integerSetting(env, "ORCHESTRATOR_STEP_RETENTION_INTERVAL_S", { default: 3600, min: 1, max: 86_400 }) * 1000,
    seriesIntervalMs: integerSetting(env, "ORCHESTRATOR_SERIES_INTERVAL_MS", {
      default: 10_000,
      min: 100,
      max: 600_000,
    }),
    traceSampleRatio: sessionSampleRatio(env),
  });
}
