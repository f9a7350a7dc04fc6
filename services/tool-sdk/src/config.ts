// Typed configuration of a tool server, read once from the environment; invalid values stop the
// process before it binds anything. Names are prefixed by the tool, e.g. BILLING_PORT.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { type LogLevel, parseLogLevel } from "./logger.js";

export interface ToolConfig {
  readonly tool: string;
  readonly host: string;
  readonly port: number;
  readonly metricsPort: number;
  readonly maxConcurrent: number;
  readonly shutdownGraceMs: number;
  /**
   * A connection older than this is asked to go away (GOAWAY), so clients resolve the service's
   * name again and spread onto replicas added since; 0 = never.
   */
  readonly maxConnectionAgeMs: number;
  /** How long calls on such a connection may still run before it is closed; 0 = until they end. */
  readonly maxConnectionAgeGraceMs: number;
  /** Folder for the tool's data (SQLite files); created if missing. */
  readonly dataDir: string;
  readonly authSecret: string;
  readonly logLevel: LogLevel;
}

export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

export interface ToolDefaults {
  readonly port: number;
  readonly metricsPort: number;
  readonly maxConcurrent?: number;
  readonly maxConnectionAgeMs?: number;
  readonly maxConnectionAgeGraceMs?: number;
}

/** Tools serve short unary calls: new replicas get traffic within about half a minute. */
export const DEFAULT_MAX_CONNECTION_AGE_MS = 30_000;
/** Longer than any tool's SLA timeout, so calls in flight on an aged connection finish. */
export const DEFAULT_MAX_CONNECTION_AGE_GRACE_MS = 10_000;

type Env = Readonly<Record<string, string | undefined>>;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`${name} must be an integer in ${min}..${max}, got "${raw}"`);
  }
  return value;
}

function logLevel(raw: string | undefined): LogLevel {
  try {
    return parseLogLevel(raw);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
}

/** The shared signing secret of caller tokens: LOOPGUARD_AUTH_SECRET, or the file LOOPGUARD_AUTH_SECRET_FILE names. */
export function readAuthSecret(env: Env = process.env): string {
  const file = env.LOOPGUARD_AUTH_SECRET_FILE;
  const secret = file ? readFileSync(file, "utf8").trim() : (env.LOOPGUARD_AUTH_SECRET ?? "");
  if (secret.length < 32) {
    throw new ConfigError(
      "set LOOPGUARD_AUTH_SECRET (or LOOPGUARD_AUTH_SECRET_FILE) to a secret of at least 32 characters; `pnpm start` makes one under .data/",
    );
  }
  return secret;
}

/** `tool` is the contract's tool name, e.g. "kb-search" → variables KB_SEARCH_PORT, … */
export function loadToolConfig(tool: string, defaults: ToolDefaults, env: Env = process.env): ToolConfig {
  const prefix = tool.toUpperCase().replace(/[^A-Z0-9]+/g, "_");
  return Object.freeze({
    tool,
    host: env[`${prefix}_HOST`] || "127.0.0.1",
    port: integer(env, `${prefix}_PORT`, defaults.port, 0, 65535),
    metricsPort: integer(env, `${prefix}_METRICS_PORT`, defaults.metricsPort, 0, 65535),
    maxConcurrent: integer(env, `${prefix}_MAX_CONCURRENT`, defaults.maxConcurrent ?? 64, 1, 100_000),
    shutdownGraceMs: integer(env, `${prefix}_SHUTDOWN_GRACE_MS`, 10_000, 0, 600_000),
    maxConnectionAgeMs: integer(env, `${prefix}_MAX_CONNECTION_AGE_MS`, defaults.maxConnectionAgeMs ?? DEFAULT_MAX_CONNECTION_AGE_MS, 0, 2_000_000_000),
    maxConnectionAgeGraceMs: integer(
      env,
      `${prefix}_MAX_CONNECTION_AGE_GRACE_MS`,
      defaults.maxConnectionAgeGraceMs ?? DEFAULT_MAX_CONNECTION_AGE_GRACE_MS,
      0,
      2_000_000_000,
    ),
    dataDir: resolve(env.LOOPGUARD_DATA_DIR || ".data"),
    authSecret: readAuthSecret(env),
    logLevel: logLevel(env.LOG_LEVEL),
  });
}

/** The config as it may be logged: everything but the secret. */
export function describeConfig(config: ToolConfig): Record<string, unknown> {
  const { authSecret: _secret, ...rest } = config;
  return rest;
}
