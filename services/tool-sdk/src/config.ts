// Typed configuration of a tool server, read once from the environment; invalid values stop the
// process before it binds anything. Names are prefixed by the tool, e.g. BILLING_PORT.
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import type { FaultProfile } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { hostSetting } from "./address-settings.js";
import { type KeyError, type SigningKey, signingKeyFromJwk } from "./auth.js";
import { type CallKey, readCallKeys } from "./call-keys.js";
import { faultSummary, parseFaultProfile } from "./faults.js";
import { type BoundKeySet, publicKeySet } from "./key-bindings.js";
import { LOG_LEVELS, type LogLevel } from "./logger.js";
import { ConfigError, type Env, enumSetting, integerSetting, switchSetting } from "./settings.js";

export interface ToolConfig {
  readonly tool: string;
  readonly host: string;
  readonly port: number;
  readonly metricsPort: number;
  readonly maxConcurrent: number;
  /** Unary calls one caller (token subject) may have in flight at once: half of maxConcurrent unless set. */
  readonly maxConcurrentPerCaller: number;
  /** Server streams open at once, counted apart from unary calls (maxConcurrent). */
  readonly maxStreams: number;
  /** Server streams one caller (token subject) may hold open at once. */
  readonly maxStreamsPerCaller: number;
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
  /** Public keys that verify callers' tokens, with their bindings (LOOPGUARD_JWKS_FILE or LOOPGUARD_JWKS). */
  readonly publicKeys: BoundKeySet;
  /** LOOPGUARD_JWKS_FILE, followed at run time: a key revoked there stops verifying within about a second. */
  readonly publicKeysFile?: string;
  /**
   * <PREFIX>_CALL_KEYS_FILE: this tool's own keys for the orchestrator's call credentials (derived
   * from the orchestrator's call secrets), followed at run time like the JWKS. Unset: the tool
   * accepts only signed tokens, and an orchestrator minting call credentials is refused here.
   */
  readonly callKeys?: { readonly file: string; readonly keys: readonly CallKey[] };
  /**
   * <PREFIX>_BREAK_GLASS=on: an irreversible method also accepts a break-glass token (a person's
   * break-glass key, with a reason) instead of the orchestrator's request-bound one. Default off.
   */
  readonly breakGlass: boolean;
  readonly logLevel: LogLevel;
  /** LOOPGUARD_FAULT_PROFILE: faults in force from the start (drills, a release rehearsal's bad version); none when unset. */
  readonly faultProfile?: FaultProfile;
}

/** The variable that sets a fault profile at start, in the JSON form SetFaults takes. */
export const FAULT_PROFILE_ENV = "LOOPGUARD_FAULT_PROFILE";

export interface ToolDefaults {
  readonly port: number;
  readonly metricsPort: number;
  readonly maxConcurrent?: number;
  readonly maxStreams?: number;
  readonly maxStreamsPerCaller?: number;
  readonly maxConnectionAgeMs?: number;
  readonly maxConnectionAgeGraceMs?: number;
}

/** Tools serve short unary calls: new replicas get traffic within about half a minute. */
export const DEFAULT_MAX_CONNECTION_AGE_MS = 30_000;
/** Longer than any tool's SLA timeout, so calls in flight on an aged connection finish. */
export const DEFAULT_MAX_CONNECTION_AGE_GRACE_MS = 10_000;

function readFaultProfile(env: Env): FaultProfile | undefined {
  const raw = env[FAULT_PROFILE_ENV];
  if (raw === undefined || raw.trim() === "") return undefined;
  try {
    return parseFaultProfile(raw);
  } catch (error) {
    throw new ConfigError(`${FAULT_PROFILE_ENV}: ${(error as Error).message}`);
  }
}

function readText(name: string, path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(`${name}: cannot read ${path} (${(error as NodeJS.ErrnoException).code ?? "error"})`);
  }
}

function readJson(name: string, path: string): unknown {
  const text = readText(name, path);
  try {
    return JSON.parse(text);
  } catch {
    throw new ConfigError(`${name}: ${path} is not JSON`);
  }
}

/** A secret setting's value and the variable it came from, for messages that name it. */
export interface SecretSetting {
  readonly value: string;
  readonly variable: string;
}

/**
 * A secret setting `name`: the text of the file `<name>_FILE` names (a mounted Secret, so the value
 * stays out of the environment, where process listings, `kubectl exec … env` and child processes
 * see it), trimmed of the newline an editor or `echo` leaves; else `name` itself; undefined when
 * neither is set. Both set, an unreadable file or an empty one is a ConfigError; the value is
 * never echoed.
 */
export function secretSetting(env: Env, name: string): SecretSetting | undefined {
  const fileVariable = `${name}_FILE`;
  const file = env[fileVariable];
  if (!file) return env[name] ? { value: env[name], variable: name } : undefined;
  if (env[name]) throw new ConfigError(`set ${name} or ${fileVariable}, not both`);
  const value = readText(fileVariable, file).trim();
  if (value === "") throw new ConfigError(`${fileVariable}: ${file} is empty`);
  return { value, variable: fileVariable };
}

/** Refuses the retired shared secret, so a deployment still setting it learns why instead of running with other credentials. */
function refuseSharedSecret(env: Env): void {
  for (const name of ["LOOPGUARD_AUTH_SECRET", "LOOPGUARD_AUTH_SECRET_FILE"]) {
    if (env[name]) {
      throw new ConfigError(
        `${name} is no longer used: tokens are signed with Ed25519 keys — give every service LOOPGUARD_JWKS_FILE (public keys) and the orchestrator LOOPGUARD_SIGNING_KEY_FILE (its private key); \`pnpm keys new\` makes them`,
      );
    }
  }
}

/** The public keys that verify callers' tokens: the JWKS file LOOPGUARD_JWKS_FILE names, or LOOPGUARD_JWKS inline. */
export function readPublicKeys(env: Env = process.env): BoundKeySet {
  refuseSharedSecret(env);
  const file = env.LOOPGUARD_JWKS_FILE;
  const name = file ? "LOOPGUARD_JWKS_FILE" : "LOOPGUARD_JWKS";
  let value: unknown;
  if (file) value = readJson(name, file);
  else if (env.LOOPGUARD_JWKS) {
    try {
      value = JSON.parse(env.LOOPGUARD_JWKS);
    } catch {
      throw new ConfigError("LOOPGUARD_JWKS is not JSON");
    }
  } else {
    throw new ConfigError(
      "set LOOPGUARD_JWKS_FILE to a JWKS of the public keys that sign callers' tokens; `pnpm start` makes one under .data/keys/",
    );
  }
  try {
    return publicKeySet(value);
  } catch (error) {
    throw new ConfigError(`${name}: ${(error as KeyError).message}`);
  }
}

/** The private key that signs tokens, from the JWK file LOOPGUARD_SIGNING_KEY_FILE names (never inline: a key in the environment leaks into process listings and crash dumps). */
export function readSigningKey(env: Env = process.env): SigningKey {
  const file = env.LOOPGUARD_SIGNING_KEY_FILE;
  if (!file)
    throw new ConfigError(
      "set LOOPGUARD_SIGNING_KEY_FILE to the private JWK that signs tokens; `pnpm start` makes one under .data/keys/",
    );
  try {
    return signingKeyFromJwk(readJson("LOOPGUARD_SIGNING_KEY_FILE", file));
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`LOOPGUARD_SIGNING_KEY_FILE: ${(error as KeyError).message}`);
  }
}

/** A tool's call keys, from <PREFIX>_CALL_KEYS_FILE (a file only, like every secret); none when unset. */
export function readToolCallKeys(tool: string, env: Env = process.env): ToolConfig["callKeys"] {
  const name = `${envPrefixOf(tool)}_CALL_KEYS_FILE`;
  const file = env[name];
  if (!file) return undefined;
  try {
    return { file, keys: readCallKeys(readJson(name, file), tool) };
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`${name}: ${(error as KeyError).message}`);
  }
}

/** The orchestrator's call secrets, from LOOPGUARD_CALL_SECRETS_FILE (the first mints); none when unset. */
export function readCallSecrets(env: Env = process.env): { file: string; secrets: CallKey[] } | undefined {
  const file = env.LOOPGUARD_CALL_SECRETS_FILE;
  if (!file) return undefined;
  try {
    return { file, secrets: readCallKeys(readJson("LOOPGUARD_CALL_SECRETS_FILE", file)) };
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`LOOPGUARD_CALL_SECRETS_FILE: ${(error as KeyError).message}`);
  }
}

export interface LoadOptions {
  /** The service signs tokens (the orchestrator). A tool only verifies, and refuses a private key. */
  readonly signs?: boolean;
}

/** The prefix of a tool's variables: its contract's tool name, e.g. "kb-search" → KB_SEARCH (KB_SEARCH_PORT, KB_SEARCH_ADDR, …). */
export function envPrefixOf(tool: string): string {
  return tool.toUpperCase().replace(/[^A-Z0-9]+/g, "_");
}

/** `tool` is the contract's tool name, e.g. "kb-search" → variables KB_SEARCH_PORT, … */
/** LOOPGUARD_DATA_DIR, absolute (default .data in the working directory). */
export function dataDirOf(env: Env = process.env): string {
  return resolve(env.LOOPGUARD_DATA_DIR || ".data");
}

export function loadToolConfig(
  tool: string,
  defaults: ToolDefaults,
  env: Env = process.env,
  options: LoadOptions = {},
): ToolConfig {
  if (!options.signs && env.LOOPGUARD_SIGNING_KEY_FILE) {
    throw new ConfigError(
      `${tool} only verifies tokens and must not hold a private key: unset LOOPGUARD_SIGNING_KEY_FILE`,
    );
  }
  if (!options.signs && env.LOOPGUARD_CALL_SECRETS_FILE) {
    throw new ConfigError(
      `${tool} must not hold the orchestrator's call secrets (they make every tool's key): unset LOOPGUARD_CALL_SECRETS_FILE and give it ${envPrefixOf(tool)}_CALL_KEYS_FILE`,
    );
  }
  const callKeys = options.signs ? undefined : readToolCallKeys(tool, env);
  const prefix = envPrefixOf(tool);
  const maxStreams = integerSetting(env, `${prefix}_MAX_STREAMS`, {
    default: defaults.maxStreams ?? 256,
    min: 1,
    max: 1_000_000,
  });
  const maxConcurrent = integerSetting(env, `${prefix}_MAX_CONCURRENT`, {
    default: defaults.maxConcurrent ?? 64,
    min: 1,
    max: 100_000,
  });
  const faults = readFaultProfile(env);
  return Object.freeze({
    tool,
    host: hostSetting(env, `${prefix}_HOST`, "127.0.0.1"),
    port: integerSetting(env, `${prefix}_PORT`, { default: defaults.port, min: 0, max: 65535 }),
    metricsPort: integerSetting(env, `${prefix}_METRICS_PORT`, { default: defaults.metricsPort, min: 0, max: 65535 }),
    maxConcurrent,
    maxConcurrentPerCaller: integerSetting(env, `${prefix}_MAX_CONCURRENT_PER_CALLER`, {
      default: Math.max(1, Math.floor(maxConcurrent / 2)),
      min: 1,
      max: maxConcurrent,
    }),
    maxStreams,
    maxStreamsPerCaller: integerSetting(env, `${prefix}_MAX_STREAMS_PER_CALLER`, {
      default: Math.min(maxStreams, defaults.maxStreamsPerCaller ?? 64),
      min: 1,
      max: maxStreams,
    }),
    shutdownGraceMs: integerSetting(env, `${prefix}_SHUTDOWN_GRACE_MS`, { default: 10_000, min: 0, max: 600_000 }),
    maxConnectionAgeMs: integerSetting(env, `${prefix}_MAX_CONNECTION_AGE_MS`, {
      default: defaults.maxConnectionAgeMs ?? DEFAULT_MAX_CONNECTION_AGE_MS,
      min: 0,
      max: 2_000_000_000,
    }),
    maxConnectionAgeGraceMs: integerSetting(env, `${prefix}_MAX_CONNECTION_AGE_GRACE_MS`, {
      default: defaults.maxConnectionAgeGraceMs ?? DEFAULT_MAX_CONNECTION_AGE_GRACE_MS,
      min: 0,
      max: 2_000_000_000,
    }),
    dataDir: dataDirOf(env),
    publicKeys: readPublicKeys(env),
    ...(env.LOOPGUARD_JWKS_FILE ? { publicKeysFile: env.LOOPGUARD_JWKS_FILE } : {}),
    ...(callKeys ? { callKeys } : {}),
    breakGlass: switchSetting(env, `${prefix}_BREAK_GLASS`),
    logLevel: enumSetting(env, "LOG_LEVEL", LOG_LEVELS, "info"),
    ...(faults ? { faultProfile: faults } : {}),
  });
}

/** The config as it may be logged: public keys by id only. */
export function describeConfig(config: ToolConfig): Record<string, unknown> {
  const { publicKeys, faultProfile, callKeys, ...rest } = config;
  return {
    ...rest,
    publicKeys: publicKeys.keys.map((k) => k.kid),
    ...(callKeys ? { callKeys: { file: callKeys.file, kids: callKeys.keys.map((k) => k.kid) } } : {}),
    ...(faultProfile ? { faultProfile: faultSummary(faultProfile) } : {}),
  };
}
