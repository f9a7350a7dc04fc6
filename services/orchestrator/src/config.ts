// The orchestrator's typed configuration, read once from the environment; a bad value stops
// the process before it binds anything (exit 2).
import { hostname } from "node:os";
import { join } from "node:path";
import { MAX_STORE_POOL_SIZE, parseStoreUrl, redactStoreUrl } from "@loopguard/sql-store";
import {
  approvalFieldsOf,
  type BoundKeySet,
  booleanSetting,
  ConfigError,
  envPrefixOf,
  integerSetting,
  type IntegerSpec,
  loadToolConfig,
  manifestDefaults,
  type OidcSettings,
  oidcSettingsOf,
  optionalIntegerSetting,
  readCallSecrets,
  readSigningKey,
  secretSetting,
  servicePolicy,
  type SigningKey,
  targetsSetting,
  type ToolConfig,
} from "@loopguard/tool-sdk";
import type { CallSecrets } from "./guard/tool-tokens.js";
import { approvalSettings } from "./guard/approval-settings.js";
import { type ApprovalRules, describeApprovalRules } from "./guard/approvals.js";
import { type ContextLimits, DEFAULT_CONTEXT_LIMITS } from "./governance/context-governance.js";
import { type ModelSettings, modelSettings } from "./policies/model-config.js";
import { LOCAL_TOOL_ADDRESSES } from "./generated/local-tool-addresses.js";
import { storeSetting } from "./store/open-store.js";
import { POSTGRES_STORE_DEFAULTS } from "./store/postgres-store-options.js";
import { DEFAULT_MAX_TAKEOVERS } from "./session/takeovers.js";
import { DEFAULT_TOOL_SERVICES } from "./tool-registry.js";
import { type OpsSettings, opsSettings, traceRetention } from "./governance/ops-settings.js";
import type { TraceRetention } from "./governance/trace-files.js";

export interface OrchestratorConfig extends ToolConfig {
  /** Signs the per-call tool tokens (LOOPGUARD_SIGNING_KEY_FILE); no other service holds it. */
  readonly signingKey: SigningKey;
  /** LOOPGUARD_CALL_SECRETS_FILE: tool calls carry HS256 credentials under each tool's derived key; else Ed25519 tokens. */
  readonly callSecrets?: CallSecrets;
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
  /**
   * ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES: a tool's answer larger than this is refused undecoded (ANSWER_TOO_LARGE), so
   * one answer cannot hold up the event loop every session shares.
   */
  readonly maxToolAnswerBytes: number;
  /** ORCHESTRATOR_HEDGED_READS: hedge the reads whose contract allows it (a second attempt to another replica after the method's p95). */
  readonly hedgedReads: boolean;
  readonly instanceId: string;
  readonly leaseTtlMs: number;
  readonly maxActiveSessions: number;
  /** Sessions one caller may have in flight (not ended), across every replica; past it StartSession is RESOURCE_EXHAUSTED. */
  readonly maxSessionsPerCaller: number;
  /** How often approvals that expired unanswered are ended. */
  readonly approvalSweepMs: number;
  /** ORCHESTRATOR_MAX_TAKEOVERS: a session taken over more often than this from replicas that stopped without handing it back is stopped. */
  readonly maxTakeovers: number;
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

const DEFAULT_OPENAI_MODEL = "gpt-4o-mini";

/**
 * 256 KiB: four times the suite's largest valid answer (ListRefunds' 1000 refunds, about 55 KB) and eight times what a
 * prompt holds before it is compressed (CONTEXT_COMPRESS_TOKENS, 8000 tokens: about 32 KB). At most grpc-js's 4 MiB,
 * whose answers cost the event loop up to 0.4 s to decode and check (docs/performance.md).
 */
const TOOL_ANSWER_BYTES: IntegerSpec = { default: 256 * 1024, min: 1024, max: 4 * 1024 * 1024 };

/** A store timeout: 100 ms..10 min. */
function ms(fallback: number): IntegerSpec {
  return { default: fallback, min: 100, max: 600_000 };
}

function contextLimits(env: Env): ContextLimits {
  const defaults = DEFAULT_CONTEXT_LIMITS;
  return {
    compressAboveTokens: integerSetting(env, "CONTEXT_COMPRESS_TOKENS", {
      default: defaults.compressAboveTokens,
      min: 100,
      max: 10_000_000,
    }),
    windowTokens: integerSetting(env, "MODEL_CONTEXT_WINDOW_TOKENS", {
      default: defaults.windowTokens,
      min: 1000,
      max: 10_000_000,
    }),
    keepRecent: defaults.keepRecent,
    maxOutputTokens: integerSetting(env, "MODEL_MAX_OUTPUT_TOKENS", {
      default: defaults.maxOutputTokens,
      min: 16,
      max: 1_000_000,
    }),
  };
}

/**
 * OPENAI_BASE_URL, "" when unset: an http(s) URL without a user or password (the key is
 * OPENAI_API_KEY, or the file OPENAI_API_KEY_FILE names). The value itself is never echoed: it may hold a credential.
 */
function openaiBaseUrl(env: Env): string {
  const value = env.OPENAI_BASE_URL ?? "";
  if (value === "") return "";
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (url?.protocol !== "http:" && url?.protocol !== "https:")
    throw new ConfigError("OPENAI_BASE_URL must be an http:// or https:// URL");
  if (url.username !== "" || url.password !== "")
    throw new ConfigError("OPENAI_BASE_URL must not carry a user or password: the key goes in OPENAI_API_KEY");
  return value;
}

/** A base URL as it may be logged: its query string and fragment (where a proxy's key may ride) dropped. */
function loggableUrl(value: string): string {
  const url = new URL(value);
  return `${url.origin}${url.pathname}`;
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
  const openaiUrl = openaiBaseUrl(env);
  const storeUrl = storeSetting(env, base.dataDir);
  // Checked here, so that a bad URL stops the process (exit 2) before anything binds.
  parseStoreUrl(storeUrl.value, storeUrl.variable, ConfigError);
  const oidc = oidcSettingsOf(env);
  const callSecrets = readCallSecrets(env);
  const store = POSTGRES_STORE_DEFAULTS;
  return Object.freeze({
    ...base,
    signingKey: checkedSigningKey(env, base.publicKeys),
    ...(callSecrets ? { callSecrets } : {}),
    storeUrl: storeUrl.value,
    storePoolSize: optionalIntegerSetting(env, "ORCHESTRATOR_STORE_POOL_SIZE", { min: 1, max: MAX_STORE_POOL_SIZE }),
    migrateOnStart: booleanSetting(env, "ORCHESTRATOR_MIGRATE_ON_START", true),
    storeTimeouts: {
      connectTimeoutMs: integerSetting(env, "ORCHESTRATOR_STORE_CONNECT_TIMEOUT_MS", ms(store.connectTimeoutMs)),
      statementTimeoutMs: integerSetting(env, "ORCHESTRATOR_STORE_STATEMENT_TIMEOUT_MS", ms(store.statementTimeoutMs)),
    },
    toolTargets: Object.fromEntries(
      DEFAULT_TOOL_SERVICES.map((service) => {
        const tool = servicePolicy(service).toolName;
        return [tool, targetsSetting(env, `${envPrefixOf(tool)}_ADDR`, LOCAL_TOOL_ADDRESSES[tool] ?? "")];
      }),
    ),
    maxToolAnswerBytes: integerSetting(env, "ORCHESTRATOR_MAX_TOOL_ANSWER_BYTES", TOOL_ANSWER_BYTES),
    hedgedReads: booleanSetting(env, "ORCHESTRATOR_HEDGED_READS", true),
    instanceId: env.ORCHESTRATOR_INSTANCE_ID || `${hostname()}-${process.pid}`,
    leaseTtlMs: integerSetting(env, "ORCHESTRATOR_LEASE_TTL_MS", { default: 5000, min: 500, max: 600_000 }),
    maxActiveSessions: integerSetting(env, "ORCHESTRATOR_MAX_ACTIVE_SESSIONS", { default: 256, min: 1, max: 100_000 }),
    maxSessionsPerCaller: integerSetting(env, "ORCHESTRATOR_MAX_SESSIONS_PER_CALLER", {
      default: DEFAULT_MAX_SESSIONS_PER_CALLER,
      min: 1,
      max: 1_000_000,
    }),
    approvalSweepMs: integerSetting(env, "ORCHESTRATOR_APPROVAL_SWEEP_MS", { default: 1000, min: 50, max: 600_000 }),
    wakePerSecond: integerSetting(env, "ORCHESTRATOR_WAKE_PER_SECOND", { default: 50, min: 1, max: 10_000 }),
    maxTakeovers: integerSetting(env, "ORCHESTRATOR_MAX_TAKEOVERS", {
      default: DEFAULT_MAX_TAKEOVERS,
      min: 1,
      max: 1000,
    }),
    approvals: approvalSettings(env, approvalFieldsOf(DEFAULT_TOOL_SERVICES)),
    openai: openaiUrl
      ? {
          baseUrl: openaiUrl,
          model: env.OPENAI_MODEL || DEFAULT_OPENAI_MODEL,
          apiKey: secretSetting(env, "OPENAI_API_KEY")?.value ?? "",
        }
      : undefined,
    traceDir: join(base.dataDir, "traces"),
    traceRetention: traceRetention(env),
    context: contextLimits(env),
    ops: opsSettings(env),
    model: modelSettings(env, openaiUrl ? env.OPENAI_MODEL || DEFAULT_OPENAI_MODEL : undefined),
    ...(oidc ? { oidc } : {}),
  });
}

/** The config as it may be logged: no secrets, no credentials in the store URL, keys by id only. */
export function describeOrchestratorConfig(config: OrchestratorConfig): Record<string, unknown> {
  const { signingKey, callSecrets, publicKeys, openai, storeUrl, approvals, ...rest } = config;
  return {
    ...rest,
    approvals: describeApprovalRules(approvals),
    signingKey: signingKey.kid,
    callSecrets: callSecrets ? { file: callSecrets.file, kids: callSecrets.secrets.map((k) => k.kid) } : "off",
    publicKeys: publicKeys.keys.map((k) => k.kid),
    storeUrl: redactStoreUrl(storeUrl),
    // A list, not an object keyed by tool, so the logger's allow-list names no tool.
    toolTargets: Object.entries(config.toolTargets).map(([tool, address]) => ({ tool, address })),
    openai: openai ? { baseUrl: loggableUrl(openai.baseUrl), model: openai.model } : "off",
    oidc: config.oidc ?? "off",
  };
}
