// Telemetry boots first and only from the standard OTEL_* variables. Locally nothing is
// exported unless asked: OTEL_TRACES_EXPORTER (otlp | console) or an OTLP endpoint turns the
// OpenTelemetry Node SDK on; metrics stay with Prometheus (/metrics), so the SDK's own metric
// and log exporters default to "none". Call startTelemetry() as the first statement of main.ts.
import { NodeSDK } from "@opentelemetry/sdk-node";

let sdk: NodeSDK | undefined;

function wanted(env: NodeJS.ProcessEnv): boolean {
  const exporter = env.OTEL_TRACES_EXPORTER ?? "";
  if (env.OTEL_SDK_DISABLED === "true" || exporter === "none") return false;
  return exporter !== "" || Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Starts tracing when the environment asks for it; `serviceName` is the default for OTEL_SERVICE_NAME. */
export function startTelemetry(serviceName: string, env: NodeJS.ProcessEnv = process.env): boolean {
  if (sdk || !wanted(env)) return false;
  env.OTEL_SERVICE_NAME ??= serviceName;
  env.OTEL_METRICS_EXPORTER ??= "none";
  env.OTEL_LOGS_EXPORTER ??= "none";
  sdk = new NodeSDK({ instrumentations: [] });
  sdk.start();
  return true;
}

/** Flushes and stops tracing; called on shutdown so the last spans are not lost. */
export async function shutdownTelemetry(): Promise<void> {
  const running = sdk;
  sdk = undefined;
  await running?.shutdown().catch(() => undefined);
}
