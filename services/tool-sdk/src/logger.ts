// Structured JSON logs, one object a line, with trace ids. Redaction is an allow-list: only
// fields named in SAFE_FIELDS are written; any other string field is replaced by "[redacted]"
// before the line is written, so an id card, phone or token passed by mistake never reaches the
// log. What is written (the message and the allowed fields, e.g. an error message echoing a
// request) still has every id card and CN mobile in it masked (redactText).
import { REDACTED, redactNumber, redactText } from "./pii.js";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFields = Readonly<Record<string, unknown>>;

const LEVELS: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

const SAFE_FIELDS = new Set([
  "msg", "level", "time", "service", "tool", "method", "grpc_code", "code", "reason", "trace_id", "span_id",
  "duration_ms", "in_flight", "limit", "port", "metrics_port", "host", "pid", "signal", "exit_code", "attempt",
  "restart_in_ms", "error_name", "caller", "scopes", "config", "faults", "tool", "host", "storeUrl", "toolTargets", "instanceId", "leaseTtlMs", "maxActiveSessions", "approvals", "amountThresholdCents", "riskThreshold", "minConfidence", "ttlMs", "openai", "baseUrl", "model", "traceDir", "session_id", "max_concurrent", "shutdown_grace_ms", "dataDir", "logLevel", "maxConcurrent", "shutdownGraceMs", "metricsPort", "order_id", "refund_id", "replayed",
  "doc_count", "data_dir", "store", "migrations_applied", "violations", "outcome", "error_message", "field", "added_latency_ms", "error_rate", "outage", "retry_after_ms", "methods", "required_scope", "state", "count", "grace_ms", "url", "address",
]);

function redact(value: unknown, key: string): unknown {
  if (value === null || value === undefined || typeof value === "boolean") return value;
  if (typeof value === "number") return redactNumber(value);
  if (typeof value === "string") return SAFE_FIELDS.has(key) ? redactText(value) : REDACTED;
  if (Array.isArray(value)) return SAFE_FIELDS.has(key) ? value.map((v) => redact(v, key)) : REDACTED;
  if (typeof value === "object") {
    if (!SAFE_FIELDS.has(key)) return REDACTED;
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, redact(v, k)]));
  }
  return REDACTED;
}

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger whose lines all carry these fields (e.g. trace_id). */
  child(fields: LogFields): Logger;
}

export interface LoggerOptions {
  readonly service: string;
  readonly level?: LogLevel;
  readonly write?: (line: string) => void;
}

export function createLogger(options: LoggerOptions, bound: LogFields = {}): Logger {
  const min = LEVELS[options.level ?? "info"];
  const write = options.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const emit = (level: LogLevel, msg: string, fields: LogFields = {}) => {
    if (LEVELS[level] < min) return;
    const record: Record<string, unknown> = { time: new Date().toISOString(), level, service: options.service, msg: redactText(msg) };
    for (const [key, value] of Object.entries({ ...bound, ...fields })) record[key] = redact(value, key);
    write(JSON.stringify(record));
  };
  return {
    debug: (msg, fields) => emit("debug", msg, fields),
    info: (msg, fields) => emit("info", msg, fields),
    warn: (msg, fields) => emit("warn", msg, fields),
    error: (msg, fields) => emit("error", msg, fields),
    child: (fields) => createLogger(options, { ...bound, ...fields }),
  };
}

export function parseLogLevel(value: string | undefined): LogLevel {
  if (value === undefined || value === "") return "info";
  if (value in LEVELS) return value as LogLevel;
  throw new Error(`LOG_LEVEL must be one of ${Object.keys(LEVELS).join(", ")}, got "${value}"`);
}
