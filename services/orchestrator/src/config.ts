// The orchestrator's typed configuration, read once from the environment; a bad value stops
// the process before it binds anything (exit 2).
import { sessionSampleRatio } from "./session/sampling.js";
import { hostname } from "node:os";
import { join } from "node:path";
import { parseStoreUrl, readMigrateOnStart, redactStoreUrl, storePoolSize } from "@loopguard/sql-store";
import {
  acceptableIssuerUrl,
  approvalFieldsOf,
  type BoundKeySet,
  ConfigError,
  DEFAULT_OIDC_ROLES_CLAIM,
  envPrefixOf,
  loadToolConfig,
  manifestDefaults,
  type OidcSettings,
  readSigningKey,
  servicePolicy,
  type SigningKey,
  type ToolConfig,
} from "@loopguard/tool-sdk";
import {
  type AmountThresholds,
  type ApprovalRules,
  DEFAULT_APPROVAL_RULES,
  describeApprovalRules,
} from "./guard/approvals.js";
import { type ContextLimits, DEFAULT_CONTEXT_LIMITS } from "./governance/context-governance.js";
import { type ModelSettings, modelSettings } from "./policies/model-config.js";
import { LOCAL_TOOL_ADDRESSES } from "./generated/local-tool-addresses.js";
import { POSTGRES_STORE_DEFAULTS } from "./store/postgres-session-store.js";
import { DEFAULT_TOOL_SERVICES } from "./tool-registry.js";
import { DEFAULT_TRACE_RETENTION, type TraceRetention } from "./governance/trace-files.js";

export interface OrchestratorConfig extends ToolConfig {
  /** Signs the per-call tool tokens (LOOPGUARD_SIGNING_KEY_FILE); no other service holds it. */
  readonly signingKey: SigningKey;
  /** "sqlite:/path.db" or "postgres://…". */
  readonly storeUrl: string;
  /** PostgreSQL only: bounds on getting a connection and on one statement (URL parameters win). */
  readonly storeTimeouts: { readonly connectTimeoutMs: number; readonly statementTimeoutMs: number };
  /** ORCHESTRATOR_STORE_POOL_SIZE: PostgreSQL connections per replica besides the listener (the store's default when unset). */
  readonly storePoolSize: number | undefined;
  /** ORCHESTRATOR_MIGRATE_ON_START: apply pending migrations when serving starts (one local process), or only check the schema (pods). */
  readonly migrateOnStart: boolean;
  /** Addresses per tool name; several comma-separated replicas are balanced round robin. */
  readonly toolTargets: Readonly<Record<string, string[]>>;
  /** ORCHESTRATOR_HEDGED_READS: hedge the reads whose contract allows it (a second attempt to another replica after the method's p95). */
  readonly hedgedReads: boolean;
  readonly instanceId: string;
  readonly leaseTtlMs: number;
  readonly maxActiveSessions: number;
  /** Sessions one caller may have in flight (not ended), across every replica; past it StartSession is RESOURCE_EXHAUSTED. */
  readonly maxSessionsPerCaller: number;
  /** How often approvals that expired unanswered are ended. */
  readonly approvalSweepMs: number;
  /** Parked sessions this replica wakes per second at most (a recovered tool's backlog comes back at this rate, in wake order). */
  readonly wakePerSecond: number;
  readonly approvals: ApprovalRules;
  readonly openai: { readonly baseUrl: string; readonly model: string; readonly apiKey: string } | undefined;
  /** Where step traces are written as JSONL files. */
  readonly traceDir: string;
  /** How big a trace file grows, how much they take together, how long they are kept (ORCHESTRATOR_TRACE_*). */
  readonly traceRetention: TraceRetention;
  readonly context: ContextLimits;
  /** Step-row retention (step-retention.ts) and the dashboard's sampled series (time-series.ts). */
  readonly ops: OpsSettings;
  readonly model: ModelSettings;
  /** People may also sign in with this OpenID Connect provider (ORCHESTRATOR_OIDC_*); off when unset. */
  readonly oidc?: OidcSettings;
}

type Env = Readonly<Record<string, string | undefined>>;

/** Sessions in flight one caller may have unless ORCHESTRATOR_MAX_SESSIONS_PER_CALLER says otherwise. */
export const DEFAULT_MAX_SESSIONS_PER_CALLER = 2000;

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max)
    throw new ConfigError(`${name} must be an integer in ${min}..${max}, got "${raw}"`);
  return value;
}

const MAX_AMOUNT = 1_000_000_000_000;
const DEFAULT_OPENAI_MODEL = "gpt-4o-mini";

/** A fraction in 0..1 (CONFIDENCE_THRESHOLD): 0 turns the rule off, 1 sends every stated confidence below certainty to a human. */
function fraction(env: Env, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(value) || value < 0 || value > 1)
    throw new ConfigError(`${name} must be a number in 0..1, got "${raw}"`);
  return value;
}

/**
 * Per-currency thresholds: "CNY:350000,JPY:7000000" (ISO 4217 code, a colon, minor units), one
 * variable per kind of total.
 */
function thresholdsByCurrency(
  env: Env,
  names: Record<keyof AmountThresholds, string>,
): ApprovalRules["amountsByCurrency"] {
  const out: Record<string, Partial<Record<keyof AmountThresholds, number>>> = {};
  for (const [kind, name] of Object.entries(names) as [keyof AmountThresholds, string][]) {
    const raw = env[name]?.trim();
    if (!raw) continue;
    for (const entry of raw.split(",")) {
      const match = /^\s*([A-Z]{3})\s*:\s*(\d{1,13})\s*$/.exec(entry);
      const amount = Number(match?.[2]);
      if (!match || amount > MAX_AMOUNT)
        throw new ConfigError(
          `${name} must be CODE:AMOUNT[,CODE:AMOUNT…] with an ISO 4217 code and minor units up to ${MAX_AMOUNT}, got "${entry}"`,
        );
      out[match[1]!] = { ...out[match[1]!], [kind]: amount };
    }
  }
  return out;
}

const HOST_PORT = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})$/;
/** "dns:///name:port", "dns://server:53/name:port", "ipv4:…": a scheme, not a host name followed by a port. */
const GRPC_TARGET = /^[A-Za-z][A-Za-z0-9+.-]*:(?!\d+(?:,|$))/;

/**
 * A tool's replicas: "host:port[,host:port…]" (host names or IP literals, IPv6 in brackets),
 * or one gRPC target such as "dns:///<tool>.loopguard.svc.cluster.local:<port>".
 */
function targets(env: Env, name: string, fallback: string): string[] {
  const raw = (env[name] || fallback).trim();
  if (GRPC_TARGET.test(raw)) return [raw];
  const list = raw.split(",").map((t) => t.trim());
  for (const t of list) {
    const port = Number(HOST_PORT.exec(t)?.[1] ?? 0);
    if (port < 1 || port > 65535) {
      throw new ConfigError(`${name} must be host:port[,host:port…] or one target like dns:///name:port, got "${t}"`);
    }
  }
  return list;
}

/** ORCHESTRATOR_OIDC_ISSUER (https, or http on loopback for tests), its client id and roles claim; undefined when no issuer is set. */
function oidcSettings(env: Env): OidcSettings | undefined {
  const issuer = env.ORCHESTRATOR_OIDC_ISSUER ?? "";
  if (issuer === "") {
    if (env.ORCHESTRATOR_OIDC_AUDIENCE)
      throw new ConfigError("ORCHESTRATOR_OIDC_AUDIENCE is set but ORCHESTRATOR_OIDC_ISSUER is not");
    return undefined;
  }
  if (!acceptableIssuerUrl(issuer))
    throw new ConfigError(
      `ORCHESTRATOR_OIDC_ISSUER must be an https URL (or http://127.0.0.1… for a local provider), got "${issuer}"`,
    );
  const audience = env.ORCHESTRATOR_OIDC_AUDIENCE ?? "";
  if (audience === "")
    throw new ConfigError(
      "ORCHESTRATOR_OIDC_AUDIENCE (the client id ID tokens are issued for) is required with ORCHESTRATOR_OIDC_ISSUER",
    );
  const rolesClaim = env.ORCHESTRATOR_OIDC_ROLES_CLAIM || DEFAULT_OIDC_ROLES_CLAIM;
  return { issuer, audience, rolesClaim };
}

/** The orchestrator signs with a key the JWKS binds to it: any other would have every tool call refused. */
function checkedSigningKey(env: Env, publicKeys: BoundKeySet): SigningKey {
  const key = readSigningKey(env);
  const published = publicKeys.keys.find((k) => k.kid === key.kid) as Record<string, unknown> | undefined;
  if (!published)
    throw new ConfigError(
      `LOOPGUARD_SIGNING_KEY_FILE: key ${key.kid} is not in the JWKS (${publicKeys.revoked?.includes(key.kid) ? "revoked" : "add its public half"}); tools would refuse every call`,
    );
  if (published.loopguard_role !== "orchestrator") {
    throw new ConfigError(
      `LOOPGUARD_SIGNING_KEY_FILE: key ${key.kid} is bound as ${String(published.loopguard_role)} in the JWKS; the orchestrator signs with a key of role orchestrator`,
    );
  }
  return key;
}

const GIB = 1024 ** 3;

/** The trace files' limits; the total must hold the open file and at least one rolled one. */
function traceRetention(env: Env): TraceRetention {
  const fileBytes = int(env, "ORCHESTRATOR_TRACE_FILE_BYTES", DEFAULT_TRACE_RETENTION.fileBytes, 4096, GIB);
  const totalBytes = int(env, "ORCHESTRATOR_TRACE_TOTAL_BYTES", DEFAULT_TRACE_RETENTION.totalBytes, 8192, 64 * GIB);
  const maxAgeHours = int(
    env,
    "ORCHESTRATOR_TRACE_MAX_AGE_HOURS",
    DEFAULT_TRACE_RETENTION.maxAgeMs / 3600_000,
    1,
    366 * 24,
  );
  if (totalBytes < 2 * fileBytes) {
    throw new ConfigError(
      `ORCHESTRATOR_TRACE_TOTAL_BYTES (${totalBytes}) must be at least twice ORCHESTRATOR_TRACE_FILE_BYTES (${fileBytes})`,
    );
  }
  return Object.freeze({ fileBytes, totalBytes, maxAgeMs: maxAgeHours * 3600_000 });
}

export interface OpsSettings {
  readonly stepRetentionDays: number;
  readonly stepRetentionIntervalMs: number;
  readonly seriesIntervalMs: number;
  /** The ratio of ordinary sessions whose traces are kept (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; see session/sampling.ts). */
  readonly traceSampleRatio: number;
}

function opsSettings(env: Env): OpsSettings {
  return Object.freeze({
    stepRetentionDays: int(env, "ORCHESTRATOR_STEP_RETENTION_DAYS", 30, 1, 3660),
    stepRetentionIntervalMs: int(env, "ORCHESTRATOR_STEP_RETENTION_INTERVAL_S", 3600, 1, 86_400) * 1000,
    seriesIntervalMs: int(env, "ORCHESTRATOR_SERIES_INTERVAL_MS", 10_000, 100, 600_000),
    traceSampleRatio: sessionSampleRatio(env),
  });
}

function hedgedReads(env: Env): boolean {
  const value = env.ORCHESTRATOR_HEDGED_READS ?? "true";
  if (value !== "true" && value !== "false")
    throw new ConfigError(`ORCHESTRATOR_HEDGED_READS must be true or false, got "${value}"`);
  return value === "true";
}

export function loadOrchestratorConfig(env: Env = process.env): OrchestratorConfig {
  // ORCHESTRATOR_HTTP_PORT is the documented name of the HTTP port (health, metrics, dashboard).
  // Its API streams (WatchSession) may stay open for long: an aged connection gets a GOAWAY but
  // keeps its streams (no grace limit); new calls go to a fresh connection, maybe another replica.
  const defaults = {
    ...manifestDefaults(import.meta.url),
    maxConcurrent: 1024,
    maxStreams: 2048,
    maxStreamsPerCaller: 512,
    maxConnectionAgeMs: 300_000,
    maxConnectionAgeGraceMs: 0,
  };
  const base = loadToolConfig(
    "orchestrator",
    defaults,
    {
      ...env,
      ORCHESTRATOR_METRICS_PORT: env.ORCHESTRATOR_HTTP_PORT ?? env.ORCHESTRATOR_METRICS_PORT,
    },
    { signs: true },
  );
  const openaiUrl = env.OPENAI_BASE_URL ?? "";
  const storeUrl = env.ORCHESTRATOR_STORE || `sqlite:${join(base.dataDir, "orchestrator.db")}`;
  // Checked here, so that a bad URL stops the process (exit 2) before anything binds.
  parseStoreUrl(storeUrl, "ORCHESTRATOR_STORE", ConfigError);
  const oidc = oidcSettings(env);
  return Object.freeze({
    ...base,
    signingKey: checkedSigningKey(env, base.publicKeys),
    storeUrl,
    storePoolSize: storePoolSize(env, "ORCHESTRATOR", ConfigError),
    migrateOnStart: readMigrateOnStart(env, "ORCHESTRATOR", ConfigError),
    storeTimeouts: {
      connectTimeoutMs: int(
        env,
        "ORCHESTRATOR_STORE_CONNECT_TIMEOUT_MS",
        POSTGRES_STORE_DEFAULTS.connectTimeoutMs,
        100,
        600_000,
      ),
      statementTimeoutMs: int(
        env,
        "ORCHESTRATOR_STORE_STATEMENT_TIMEOUT_MS",
        POSTGRES_STORE_DEFAULTS.statementTimeoutMs,
        100,
        600_000,
      ),
    },
    toolTargets: Object.fromEntries(
      DEFAULT_TOOL_SERVICES.map((service) => {
        const tool = servicePolicy(service).toolName;
        return [tool, targets(env, `${envPrefixOf(tool)}_ADDR`, LOCAL_TOOL_ADDRESSES[tool] ?? "")];
      }),
    ),
    hedgedReads: hedgedReads(env),
    instanceId: env.ORCHESTRATOR_INSTANCE_ID || `${hostname()}-${process.pid}`,
    leaseTtlMs: int(env, "ORCHESTRATOR_LEASE_TTL_MS", 5000, 500, 600_000),
    maxActiveSessions: int(env, "ORCHESTRATOR_MAX_ACTIVE_SESSIONS", 256, 1, 100_000),
    maxSessionsPerCaller: int(
      env,
      "ORCHESTRATOR_MAX_SESSIONS_PER_CALLER",
      DEFAULT_MAX_SESSIONS_PER_CALLER,
      1,
      1_000_000,
    ),
    approvalSweepMs: int(env, "ORCHESTRATOR_APPROVAL_SWEEP_MS", 1000, 50, 600_000),
    wakePerSecond: int(env, "ORCHESTRATOR_WAKE_PER_SECOND", 50, 1, 10_000),
    approvals: {
      amounts: {
        entity: int(env, "APPROVAL_AMOUNT_THRESHOLD_CENTS", DEFAULT_APPROVAL_RULES.amounts.entity, 0, MAX_AMOUNT),
        session: int(
          env,
          "APPROVAL_SESSION_AMOUNT_THRESHOLD_CENTS",
          DEFAULT_APPROVAL_RULES.amounts.session,
          0,
          MAX_AMOUNT,
        ),
        customer: int(
          env,
          "APPROVAL_CUSTOMER_AMOUNT_THRESHOLD",
          DEFAULT_APPROVAL_RULES.amounts.customer,
          0,
          MAX_AMOUNT,
        ),
      },
      amountsByCurrency: thresholdsByCurrency(env, {
        entity: "APPROVAL_AMOUNT_THRESHOLDS",
        session: "APPROVAL_SESSION_AMOUNT_THRESHOLDS",
        customer: "APPROVAL_CUSTOMER_AMOUNT_THRESHOLDS",
      }),
      customerWindowMs: int(
        env,
        "APPROVAL_CUSTOMER_WINDOW_MS",
        DEFAULT_APPROVAL_RULES.customerWindowMs,
        60_000,
        366 * 24 * 3600_000,
      ),
      thresholds: Object.fromEntries(
        approvalFieldsOf(DEFAULT_TOOL_SERVICES).map((f) => [
          f.setting,
          int(env, `APPROVAL_${f.setting.toUpperCase()}_THRESHOLD`, f.defaultThreshold, 0, f.maxThreshold),
        ]),
      ),
      minConfidence: fraction(env, "CONFIDENCE_THRESHOLD", DEFAULT_APPROVAL_RULES.minConfidence),
      ttlMs: int(env, "APPROVAL_TTL_MS", DEFAULT_APPROVAL_RULES.ttlMs, 1000, 7 * 24 * 3600_000),
    },
    openai: openaiUrl
      ? { baseUrl: openaiUrl, model: env.OPENAI_MODEL || DEFAULT_OPENAI_MODEL, apiKey: env.OPENAI_API_KEY ?? "" }
      : undefined,
    traceDir: join(base.dataDir, "traces"),
    traceRetention: traceRetention(env),
    context: {
      compressAboveTokens: int(
        env,
        "CONTEXT_COMPRESS_TOKENS",
        DEFAULT_CONTEXT_LIMITS.compressAboveTokens,
        100,
        10_000_000,
      ),
      windowTokens: int(env, "MODEL_CONTEXT_WINDOW_TOKENS", DEFAULT_CONTEXT_LIMITS.windowTokens, 1000, 10_000_000),
      keepRecent: DEFAULT_CONTEXT_LIMITS.keepRecent,
      maxOutputTokens: int(env, "MODEL_MAX_OUTPUT_TOKENS", DEFAULT_CONTEXT_LIMITS.maxOutputTokens, 16, 1_000_000),
    },
    ops: opsSettings(env),
    model: modelSettings(
      env,
      openaiUrl ? env.OPENAI_MODEL || DEFAULT_OPENAI_MODEL : undefined,
      (message) => new ConfigError(message),
    ),
    ...(oidc ? { oidc } : {}),
  });
}

/** The config as it may be logged: no secrets, no credentials in the store URL, keys by id only. */
export function describeOrchestratorConfig(config: OrchestratorConfig): Record<string, unknown> {
  const { signingKey, publicKeys, openai, storeUrl, approvals, ...rest } = config;
  return {
    ...rest,
    approvals: describeApprovalRules(approvals),
    signingKey: signingKey.kid,
    publicKeys: publicKeys.keys.map((k) => k.kid),
    storeUrl: redactStoreUrl(storeUrl),
    // A list, not an object keyed by tool, so the logger's allow-list names no tool.
    toolTargets: Object.entries(config.toolTargets).map(([tool, address]) => ({ tool, address })),
    openai: openai ? { baseUrl: openai.baseUrl, model: openai.model } : "off",
    oidc: config.oidc ?? "off",
  };
}
