// Structured JSON logs through pino, one object a line, with trace ids. Redaction is an allow-list,
// applied by pino's log formatter to a call's fields and by child() to its bindings (pino formats
// no child's bindings): only the SDK's own fields (SAFE_FIELDS) and those the contracts declare
// log_safe are written; any other string field is replaced by "[redacted]" before the line is
// written, so an id card, phone or token passed by mistake never reaches the log. What is written (the message and the allowed fields, e.g. an
// error message echoing a request) still has every id card and CN mobile in it masked (redactText).
import type { DescService } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import { pino, type Logger as PinoLogger } from "pino";
import { logSafeFieldsOf, servicesOf } from "./contract.js";
import { REDACTED, redactNumber, redactText } from "./pii.js";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFields = Readonly<Record<string, unknown>>;

export const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];

const SAFE_FIELDS = new Set([
  "msg",
  "level",
  "time",
  "service",
  "tool",
  "method",
  "grpc_code",
  "code",
  "reason",
  "trace_id",
  "span_id",
  "duration_ms",
  "in_flight",
  "limit",
  "port",
  "metrics_port",
  "host",
  "pid",
  "signal",
  "exit_code",
  "attempt",
  "restart_in_ms",
  "error_name",
  "caller",
  "scopes",
  "config",
  "faults",
  "tool",
  "host",
  "storeUrl",
  "toolTargets",
  "instanceId",
  "leaseTtlMs",
  "maxActiveSessions",
  "approvals",
  "minConfidence",
  "ttlMs",
  "openai",
  "baseUrl",
  "model",
  "traceDir",
  "traceRetention",
  "session_id",
  "max_concurrent",
  "shutdown_grace_ms",
  "dataDir",
  "logLevel",
  "maxConcurrent",
  "shutdownGraceMs",
  "metricsPort",
  "data_dir",
  "store",
  "migrations_applied",
  "violations",
  "outcome",
  "error_message",
  "field",
  "added_latency_ms",
  "error_rate",
  "outage",
  "retry_after_ms",
  "methods",
  "required_scope",
  "state",
  "count",
  "takeovers",
  "grace_ms",
  "url",
  "address",
  "kids",
  "break_glass",
  "publicKeys",
  "publicKeysFile",
  "callKeys",
  "callSecrets",
  "file",
  "oidc",
  "issuer",
  "audience",
  "rolesClaim",
]);

/** What a logger writes: the SDK's own fields and the log_safe fields of `contracts`. */
function redactorFor(contracts: readonly DescService[]): Redactor {
  const safe = new Set([...SAFE_FIELDS, ...logSafeFieldsOf(contracts)]);
  const redact = (value: unknown, key: string): unknown => {
    if (value === null || value === undefined || typeof value === "boolean") return value;
    if (typeof value === "number") return redactNumber(value);
    if (typeof value === "string") return safe.has(key) ? redactText(value) : REDACTED;
    if (Array.isArray(value)) return safe.has(key) ? value.map((v) => redact(v, key)) : REDACTED;
    if (typeof value === "object") {
      if (!safe.has(key)) return REDACTED;
      return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, redact(v, k)]));
    }
    return REDACTED;
  };
  return (fields) => {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(fields)) out[key] = redact(value, key);
    return out;
  };
}

type Redactor = (fields: Record<string, unknown>) => Record<string, unknown>;

const everyContract: Redactor = redactorFor(servicesOf(contractFiles));

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
  /** Takes each line, without its newline; standard output when not set. */
  readonly write?: (line: string) => void;
  /** The contracts whose log_safe fields are written; every contract's when not set. */
  readonly contracts?: readonly DescService[];
}

export function createLogger(options: LoggerOptions): Logger {
  const write = options.write;
  // Not pino.destination(1): its flush at exit retries a write that fails with EPIPE forever, so a
  // service whose log reader is gone (a supervisor killed) could never exit. process.stdout writes a
  // pipe or a file synchronously too, and its EPIPE is an event the service can let go (exitOnSignals).
  const destination = write
    ? { write: (chunk: string) => write(chunk.endsWith("\n") ? chunk.slice(0, -1) : chunk) }
    : { write: (chunk: string) => process.stdout.write(chunk) };
  const redactFields = options.contracts ? redactorFor(options.contracts) : everyContract;
  const root = pino(
    {
      level: options.level ?? "info",
      base: { service: options.service },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }), log: redactFields },
    },
    destination,
  );
  return new PinoLogging(root, root, redactFields);
}

/**
 * Our call shape (message first, fields second) over pino's; the message is masked here, as pino
 * formats no message. A line below the level costs a comparison. A child makes its pino child on
 * its first line: servers make one per call, most calls write none, and pino serialises a child's
 * bindings when it is made.
 */
class PinoLogging implements Logger {
  #made: PinoLogger | undefined;

  constructor(
    private readonly root: PinoLogger,
    made: PinoLogger | undefined,
    private readonly redactFields: Redactor,
    private readonly parent?: PinoLogging,
    private readonly bindings?: LogFields,
  ) {
    this.#made = made;
  }

  #pino(): PinoLogger {
    this.#made ??= this.parent!.#pino().child(this.redactFields(this.bindings!));
    return this.#made;
  }

  #write(level: LogLevel, msg: string, fields: LogFields = {}): void {
    if (this.root.isLevelEnabled(level)) this.#pino()[level](fields, redactText(msg));
  }

  debug(msg: string, fields?: LogFields): void {
    this.#write("debug", msg, fields);
  }

  info(msg: string, fields?: LogFields): void {
    this.#write("info", msg, fields);
  }

  warn(msg: string, fields?: LogFields): void {
    this.#write("warn", msg, fields);
  }

  error(msg: string, fields?: LogFields): void {
    this.#write("error", msg, fields);
  }

  child(fields: LogFields): Logger {
    return new PinoLogging(this.root, undefined, this.redactFields, this, fields);
  }
}
