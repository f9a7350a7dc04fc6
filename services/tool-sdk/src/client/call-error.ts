// The one error every caller of a tool sees, from toolClient and the raw client alike: the gRPC
// code, the contract's reason and details, and what the call did before it failed.
import { status } from "@grpc/grpc-js";
import { CALLER_ERROR_CODES, type CallFailure, type FieldViolation, RETRY_IN_CALL_CODES } from "../errors.js";

export interface CallErrorOptions {
  readonly code: status;
  readonly reason?: string | undefined;
  readonly domain?: string | undefined;
  readonly message: string;
  readonly retryAfterMs?: number | undefined;
  readonly fieldViolations?: readonly FieldViolation[];
  /** google.rpc.ErrorInfo.metadata, e.g. the limit a refusal names. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Attempts sent to the tool (0 when nothing was sent). */
  readonly attempts: number;
  /** The tool's name (a service without tool options: its type name). */
  readonly tool: string;
  readonly method: string;
  /** Some attempt may have reached the handler and taken effect (see CallError.outcomeUnknown). */
  readonly outcomeUnknown?: boolean;
  /** The tool's handler refused with one of its own reasons (see CallError.refusedByTool). */
  readonly refusedByTool?: boolean;
}

export class CallError extends Error implements CallFailure {
  override readonly name = "CallError";
  readonly code: status;
  readonly reason: string | undefined;
  readonly domain: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly fieldViolations: readonly FieldViolation[];
  readonly metadata: Readonly<Record<string, string>>;
  readonly attempts: number;
  readonly tool: string;
  readonly method: string;
  /**
   * True when the caller cannot tell whether the call happened: an attempt ended without an
   * answer that proves it was refused before the handler acted (a deadline, a cancel, a dropped
   * connection, an internal error). For a side effect this is "outcome unknown", not "failed".
   */
  readonly outcomeUnknown: boolean;
  /**
   * The tool itself looked at the request and refused it with a reason from its contract's closed
   * set: it was processed, and did nothing. For an idempotent side effect sent again with its key,
   * this settles what an earlier attempt did (the tool would have replayed it had it happened).
   */
  readonly refusedByTool: boolean;

  constructor(options: CallErrorOptions) {
    super(options.message);
    this.code = options.code;
    this.reason = options.reason;
    this.domain = options.domain;
    this.retryAfterMs = options.retryAfterMs;
    this.fieldViolations = options.fieldViolations ?? [];
    this.metadata = options.metadata ?? {};
    this.attempts = options.attempts;
    this.tool = options.tool;
    this.method = options.method;
    this.outcomeUnknown = options.outcomeUnknown ?? false;
    this.refusedByTool = options.refusedByTool ?? false;
  }

  /** Whether the client would have retried it within the call (RETRY_IN_CALL_CODES). */
  get retryable(): boolean {
    return RETRY_IN_CALL_CODES.has(this.code);
  }

  /** The same failure, marked as one whose outcome is unknown. */
  withOutcomeUnknown(): CallError {
    return new CallError({ ...this, message: this.message, outcomeUnknown: true });
  }

  /** The same failure, of a call that sent `attempts` (a hedge race's, whichever attempt failed so). */
  withAttempts(attempts: number): CallError {
    return attempts === this.attempts ? this : new CallError({ ...this, message: this.message, attempts });
  }
}

/**
 * A failure that is the tool's own answer: it looked at the request and refused it (a caller's
 * mistake), or answered more than this caller takes. Any replica answers the same request so: only
 * a tool that is up answers, so such a half-open probe closes the breaker, and such an answer ends a
 * hedge race. A cancel is no answer: the caller gave up.
 */
export function answeredByTool(error: unknown): error is CallError {
  if (!(error instanceof CallError)) return false;
  if (error.reason === "ANSWER_TOO_LARGE") return true;
  return CALLER_ERROR_CODES.has(error.code) && error.code !== status.CANCELLED;
}

/** Common reasons given before any handler runs: the call was not acted on. */
const REFUSED_BEFORE_HANDLING: ReadonlySet<string> = new Set([
  "CLIENT_VALIDATION_FAILED",
  "BREAKER_OPEN",
  "BULKHEAD_FULL",
  "CREDENTIALS_INVALID",
  "SCOPE_MISSING",
  "REQUEST_INVALID",
  "OVERLOADED",
  "SHUTTING_DOWN",
  "FAULT_INJECTED",
]);

/**
 * The failure proves the attempt did not act: refused before any handler ran (here, or by the
 * server's pipeline), or a refusal from the service's own closed set of reasons, which the
 * contract gives only when nothing was done. Anything else — a deadline, a cancel, a dropped
 * connection, an internal error — may have come after the handler acted.
 */
export function refusedBeforeHandling(failure: CallError): boolean {
  return failure.refusedByTool || (failure.reason !== undefined && REFUSED_BEFORE_HANDLING.has(failure.reason));
}

/** What the client itself answers a call with, as far as it tells: its tool, method and attempts sent so far. */
export interface ClientAnswered {
  readonly target: { readonly tool: string; readonly method: { readonly name: string } };
  readonly sent: { readonly attempts: number };
}

/**
 * A failure the client gives a call itself (an open breaker, a full bulkhead, a caller's deadline
 * or cancel), nothing more sent: "<tool>: <why>", with the attempts the call made before.
 */
export function clientFailure(
  call: ClientAnswered,
  code: status,
  reason: string,
  why: string,
  retryAfterMs?: number,
): CallError {
  const { tool, method } = call.target;
  return new CallError({
    code,
    reason,
    message: `${tool}: ${why}`,
    attempts: call.sent.attempts,
    tool,
    method: method.name,
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
  });
}
