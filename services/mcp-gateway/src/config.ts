// The gateway's settings from the environment, parsed once; a bad value stops it before it serves.
import { ConfigError } from "@loopguard/tool-sdk";

export interface GatewayConfig {
  /** The orchestrator's gRPC address (host:port). */
  readonly orchestratorAddr: string;
  /** Where the streamable HTTP transport listens (`--http`). */
  readonly httpHost: string;
  readonly httpPort: number;
  /** How long one tool call waits for its session to end or to stop for a person or a tool. */
  readonly callWaitMs: number;
  readonly logLevel: "debug" | "info" | "warn" | "error";
}

type Env = Readonly<Record<string, string | undefined>>;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max)
    throw new ConfigError(`${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  return value;
}

export function loadGatewayConfig(env: Env = process.env): GatewayConfig {
  const logLevel = env.MCP_LOG_LEVEL || "info";
  if (!["debug", "info", "warn", "error"].includes(logLevel))
    throw new ConfigError(`MCP_LOG_LEVEL must be debug, info, warn or error, got "${logLevel}"`);
  return Object.freeze({
    orchestratorAddr: env.ORCHESTRATOR_ADDR || "127.0.0.1:50051",
    httpHost: env.MCP_HTTP_HOST || "127.0.0.1",
    httpPort: int(env, "MCP_HTTP_PORT", 8090, 0, 65535),
    callWaitMs: int(env, "MCP_CALL_WAIT_MS", 30_000, 100, 600_000),
    logLevel: logLevel as GatewayConfig["logLevel"],
  });
}
