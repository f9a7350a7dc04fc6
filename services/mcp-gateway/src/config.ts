// The gateway's settings from the environment, parsed once; a bad value stops it before it serves.
import {
  type CallerTrust,
  enumSetting,
  hostSetting,
  integerSetting,
  LOG_LEVELS,
  type LogLevel,
  oidcSettingsOf,
  suiteJwks,
  targetSetting,
} from "@loopguard/tool-sdk";

export interface GatewayConfig {
  /** The orchestrator's gRPC address (host:port, or one target such as dns:///name:port). */
  readonly orchestratorAddr: string;
  /** Where the streamable HTTP transport listens (`--http`). */
  readonly httpHost: string;
  readonly httpPort: number;
  /** Connections `--http` serves at once; past it a new one is closed unanswered. */
  readonly httpMaxConnections: number;
  /** How long one tool call waits for its session to end or to stop for a person or a tool. */
  readonly callWaitMs: number;
  /** Tool calls the gateway runs at once (all clients together); past it a call is refused at once, GATEWAY_BUSY. */
  readonly maxCalls: number;
  readonly logLevel: LogLevel;
}

type Env = Readonly<Record<string, string | undefined>>;

export function loadGatewayConfig(env: Env = process.env): GatewayConfig {
  return Object.freeze({
    orchestratorAddr: targetSetting(env, "ORCHESTRATOR_ADDR", "127.0.0.1:50051"),
    httpHost: hostSetting(env, "MCP_HTTP_HOST", "127.0.0.1"),
    httpPort: integerSetting(env, "MCP_HTTP_PORT", { default: 8090, min: 0, max: 65535 }),
    httpMaxConnections: integerSetting(env, "MCP_HTTP_MAX_CONNECTIONS", { default: 128, min: 1, max: 100_000 }),
    callWaitMs: integerSetting(env, "MCP_CALL_WAIT_MS", { default: 30_000, min: 100, max: 600_000 }),
    maxCalls: integerSetting(env, "MCP_MAX_CALLS", { default: 64, min: 1, max: 10_000 }),
    logLevel: enumSetting(env, "MCP_LOG_LEVEL", LOG_LEVELS, "info"),
  });
}

/**
 * Whom `--http` lets reach the orchestrator: the callers the orchestrator itself trusts, from the same settings —
 * its JWKS (LOOPGUARD_JWKS_FILE, else the local suite's under LOOPGUARD_DATA_DIR; public keys only, followed as it
 * follows them) and its OpenID Connect provider (ORCHESTRATOR_OIDC_*).
 */
export function loadCallerTrust(env: Env = process.env): CallerTrust {
  const oidc = oidcSettingsOf(env);
  return Object.freeze({ ...suiteJwks(env), ...(oidc ? { oidc } : {}) });
}
