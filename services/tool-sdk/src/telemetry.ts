// Telemetry boots first and only from the standard OTEL_* variables. Locally nothing is
// exported unless asked: OTEL_TRACES_EXPORTER (otlp | console) or an OTLP endpoint turns the
// OpenTelemetry Node SDK on; metrics stay with Prometheus (/metrics), so the SDK's own metric
// exporter defaults to "none", and so does its log exporter, except in a service that emits log
// records (the orchestrator's step records) where an OTLP endpoint is set: those go to the
// collector's logs pipeline. Call startTelemetry() as the first statement of main.ts.
import { createRequire } from "node:module";
import type { NodeSDK } from "@opentelemetry/sdk-node";

const require = createRequire(import.meta.url);

let sdk: NodeSDK | undefined;

export interface TelemetryOptions {
  /** The service emits OpenTelemetry log records: export them over OTLP when an endpoint is set. */
  readonly logs?: boolean;
}

function logsEndpoint(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_LOGS_ENDPOINT);
}

function wanted(env: NodeJS.ProcessEnv, options: TelemetryOptions): boolean {
  if (env.OTEL_SDK_DISABLED === "true") return false;
  if (options.logs && logsEndpoint(env) && env.OTEL_LOGS_EXPORTER !== "none") return true;
  const exporter = env.OTEL_TRACES_EXPORTER ?? "";
  if (exporter === "none") return false;
  return exporter !== "" || Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Starts tracing (and log export) when the environment asks for it; `serviceName` is the default for OTEL_SERVICE_NAME. */
export function startTelemetry(
  serviceName: string,
  env: NodeJS.ProcessEnv = process.env,
  options: TelemetryOptions = {},
): boolean {
  if (sdk || !wanted(env, options)) return false;
  env.OTEL_SERVICE_NAME ??= serviceName;
  env.OTEL_METRICS_EXPORTER ??= "none";
  env.OTEL_LOGS_EXPORTER ??= options.logs && logsEndpoint(env) ? "otlp" : "none";
  // Loaded only when wanted: the SDK and its exporters take ~0.4 s of CPU to load, which a process
  // that exports nothing (the default locally) would spend at every start. It is CommonJS, so this
  // stays synchronous, before anything else starts.
  const { NodeSDK: Sdk } = require("@opentelemetry/sdk-node") as typeof import("@opentelemetry/sdk-node");
  sdk = new Sdk({ instrumentations: [] });
  sdk.start();
  return true;
}

/** Flushes and stops tracing; called on shutdown so the last spans are not lost. */
export async function shutdownTelemetry(): Promise<void> {
  const running = sdk;
  sdk = undefined;
  await running?.shutdown().catch(() => undefined);
}
