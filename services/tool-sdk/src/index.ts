export {
  BREAK_GLASS_MAX_REASON_CHARS,
  BREAK_GLASS_MAX_TTL_SECONDS,
  type Caller,
  CredentialsError,
  UNKNOWN_CALL_KEY,
  KeyError,
  mintToken,
  type MintOptions,
  newKeyPair,
  requestDigest,
  type SigningKey,
  signingKeyFromJwk,
  KEY_ROLES,
  type KeyRole,
  TOKEN_CLOCK_SKEW_MS,
} from "./auth.js";
export {
  type BoundKeySet,
  bindingProblem,
  type KeyBinding,
  publicKeySet,
  scopeBeyond,
  scopeMatcher,
  subjectAllowed,
  withBinding,
} from "./key-bindings.js";
export {
  acceptableIssuerUrl,
  DEFAULT_OIDC_ROLES_CLAIM,
  type OidcSettings,
  OidcVerifier,
  oidcSettingsOf,
} from "./oidc.js";
export * from "./people.js";
export {
  CALL_KEY_ALGORITHM,
  CallCredentials,
  type CallKey,
  CallKeyChecker,
  type CallKeySet,
  newCallSecret,
  readCallKeys,
  toolCallKeys,
} from "./call-keys.js";
export { FollowedFile, type FileReload } from "./followed-file.js";
export {
  type CallerTrust,
  callerVerifier,
  type KeysReload,
  TokenVerifier,
  type TokenVerifierOptions,
} from "./token-verifier.js";
export { methodDefinition, serviceDefinition } from "./bridge.js";
export { hostSetting, targetSetting, targetsSetting } from "./address-settings.js";
export {
  booleanSetting,
  ConfigError,
  enumSetting,
  fractionSetting,
  type IntegerBounds,
  type IntegerSpec,
  integerSetting,
  optionalIntegerSetting,
  switchSetting,
} from "./settings.js";
export {
  dataDirOf,
  describeConfig,
  envPrefixOf,
  FAULT_PROFILE_ENV,
  type LoadOptions,
  loadToolConfig,
  readCallSecrets,
  readPublicKeys,
  readSigningKey,
  readToolCallKeys,
  type SecretSetting,
  secretSetting,
  type ToolConfig,
  type ToolDefaults,
} from "./config.js";
export {
  ADMIN_TOOL_NAME,
  audienceOf,
  DEFAULT_MAX_REQUEST_BYTES,
  Degradation,
  Effect,
  errorReasons,
  type FieldPolicy,
  FieldRole,
  fieldPolicy,
  latencyObjectiveMs,
  maxRequestBytesOf,
  logSafeFieldsOf,
  citationsOf,
  type CitationRule,
  approvalOf,
  approvalFieldsOf,
  type ApprovalField,
  methodPath,
  methodPolicy,
  ORCHESTRATOR_TOOL_NAME,
  requiredScopesOf,
  RoutingTag,
  servicePolicy,
  servicesOf,
  TaskBound,
  toolServicesOf,
} from "./contract.js";
export {
  type CallFailure,
  decodeStatusDetails,
  type FieldViolation,
  INTERNAL_MESSAGE,
  CALLER_ERROR_CODES,
  RETRY_IN_CALL_CODES,
  RETRYABLE_CODES,
  status,
  ToolError,
  type ToolErrorOptions,
} from "./errors.js";
export { FaultSwitch, faultSummary, parseFaultProfile } from "./faults.js";
export {
  checkHealth,
  type HealthChecker,
  type HealthStatus,
  healthChecker,
  waitUntilServing,
} from "./health-client.js";
export { discoverServices, manifestDefaults, readManifest, type ServiceKind, type ServiceSpec } from "./manifest.js";
export { createLogger, LOG_LEVELS, type LogFields, type Logger, type LogLevel } from "./logger.js";
export { declareIn, type MetricDeclarations } from "./metric-declarations.js";
export { ServerMetrics } from "./metrics.js";
export {
  type Labels,
  type MetricType,
  metricValue,
  parseMetrics,
  type Sample,
  samplesOf,
  sumOf,
} from "./prometheus-text.js";
export * from "./pii.js";
export { replaceSecrets } from "./secrets.js";
export { createRawClient, type RawCallOptions, type RawClient } from "./raw-client.js";
export { CallError, type CallErrorOptions } from "./client/call-error.js";
export {
  ensureLocalKeys,
  type LocalKeys,
  localKeyPaths,
  localToolCallKeys,
  type PersonKey,
  personKey,
  suiteJwks,
} from "./local-keys.js";
export { ensureSecretFile } from "./local-secret.js";
export { type BuiltService, runService, runTool, type ServiceStart } from "./run.js";
export {
  allowedFailures,
  describeSmoke,
  minCallsToJudge,
  runSmoke,
  type SmokeCall,
  smokeCallOf,
  smokeCount,
  type SmokeOptions,
  smokePassed,
  type SmokeResult,
  smokeToken,
} from "./smoke.js";
export { shutdownTelemetry, startTelemetry } from "./telemetry.js";
export { type CallFn, compose, type Interceptor, type ServerCall } from "./server/interceptor.js";
export { jsonParseReason } from "./server/json-body.js";
export { HTTP_REQUEST_TIMEOUT_MS, httpServerOptions } from "./server/http-port.js";
export {
  type CallContext,
  type HttpRoute,
  type Normaliser,
  serveTool,
  type ServeOptions,
  type ToolDefinition,
  type ToolHandlers,
  type ToolServer,
  type Validator,
} from "./serve.js";
export { SUPERVISED_ENV } from "./server/shutdown.js";
export { type RuleViolation, violationsOf } from "./validation.js";
export { BREAKER_STATE_VALUE, ClientMetrics } from "./client/client-metrics.js";
export { type Backoff, backoffDelayMs, type Jitter } from "./backoff.js";
export { mayRetry, RetryBudget } from "./client/retry.js";
export type { ResultSource } from "./client/chain.js";
export type { ToolClientOptions } from "./client/plan.js";
export type { BreakerState } from "./client/stages/breaker.js";
export { type CallOptions, ToolClient, toolClient, type ToolResult } from "./client/tool-client.js";
export { CLI_FLAGS, numberOption, UsageError } from "./cli-options.js";
