// One error type with an explicit gRPC code, a reason from the contract's closed set and
// google.rpc details, mapped to a wire status in exactly one place (toServiceError); and its
// inverse for callers (fromServiceError).
import { create, type DescMessage, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { anyPack, anyUnpack, type Duration, DurationSchema } from "@bufbuild/protobuf/wkt";
import { Metadata, type ServiceError, status } from "@grpc/grpc-js";
import {
  BadRequestSchema,
  type BadRequest_FieldViolation,
  BadRequest_FieldViolationSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
} from "@loopguard/proto/gen/google/rpc/error_details_pb";
import { StatusSchema } from "@loopguard/proto/gen/google/rpc/status_pb";
import { redactText } from "./pii.js";

export { status };
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";

export interface FieldViolation {
  /** Path of the field in the request, e.g. "order_id" or "profile.error_rate". */
  readonly field: string;
  readonly description: string;
  /** Machine-readable rule id, e.g. "string.pattern" or "id_card.checksum". */
  readonly reason?: string;
}

export interface ToolErrorOptions {
  /** Present only on retryable errors: how long the caller must wait before trying again. */
  readonly retryAfterMs?: number;
  readonly fieldViolations?: readonly FieldViolation[];
  /** Extra ErrorInfo metadata; never secrets or personal data. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Kept for logs only; never sent to the caller. */
  readonly cause?: unknown;
}

export class ToolError extends Error {
  override readonly name = "ToolError";
  readonly retryAfterMs: number | undefined;
  readonly fieldViolations: readonly FieldViolation[];
  readonly metadata: Readonly<Record<string, string>>;

  constructor(
    readonly code: status,
    /** Wire reason from the service's closed set, e.g. "ORDER_NOT_REFUNDABLE". */
    readonly reason: string,
    message: string,
    options: ToolErrorOptions = {},
  ) {
    super(message, { cause: options.cause });
    this.retryAfterMs = options.retryAfterMs;
    this.fieldViolations = options.fieldViolations ?? [];
    this.metadata = options.metadata ?? {};
  }

  /** Whether a caller may try again (and, for non-idempotent methods, only with the same key). */
  get retryable(): boolean {
    return RETRYABLE_CODES.has(this.code);
  }
}

/**
 * The one set of retryable codes: "the same request may succeed later"; everything else is the
 * caller's to fix. The subsets below are drawn from it, never listed again.
 */
export const RETRYABLE_CODES: ReadonlySet<status> = new Set([
  status.UNAVAILABLE,
  status.RESOURCE_EXHAUSTED,
  status.ABORTED,
  status.DEADLINE_EXCEEDED,
]);

/**
 * The retryable codes a client retries within one call: DEADLINE_EXCEEDED is out, the call's one
 * deadline is spent (a later call, with a deadline of its own, may still succeed).
 */
export const RETRY_IN_CALL_CODES: ReadonlySet<status> = new Set(
  [...RETRYABLE_CODES].filter((code) => code !== status.DEADLINE_EXCEEDED),
);

/** Caller mistakes: they say nothing about the service's health, never trip a breaker, never get a fallback. */
export const CALLER_ERROR_CODES: ReadonlySet<status> = new Set([
  status.INVALID_ARGUMENT,
  status.NOT_FOUND,
  status.PERMISSION_DENIED,
  status.FAILED_PRECONDITION,
  status.ALREADY_EXISTS,
  status.UNAUTHENTICATED,
  status.OUT_OF_RANGE,
  status.CANCELLED,
]);

export const INTERNAL_MESSAGE = "internal error; see the server log for this trace id";

function durationFromMs(ms: number): Duration {
  const whole = Math.max(0, Math.round(ms));
  return create(DurationSchema, { seconds: BigInt(Math.floor(whole / 1000)), nanos: (whole % 1000) * 1_000_000 });
}

/**
 * What a ToolError tells the caller beyond its code: its message and google.rpc details. Every
 * text in them has id cards and CN mobiles masked: a message or a field violation may echo the
 * value that was refused.
 */
export function wireParts(error: ToolError, domain: string): { message: string; details: WireDetail[] } {
  const message = redactText(error.message);
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(error.metadata)) metadata[key] = redactText(value);
  const details: WireDetail[] = [
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason: error.reason, domain, metadata }) },
  ];
  if (error.retryAfterMs !== undefined && error.retryable) {
    details.push({
      desc: RetryInfoSchema,
      value: create(RetryInfoSchema, { retryDelay: durationFromMs(error.retryAfterMs) }),
    });
  }
  if (error.fieldViolations.length > 0) {
    const fieldViolations = error.fieldViolations.map((v) =>
      create(BadRequest_FieldViolationSchema, {
        field: redactText(v.field),
        description: redactText(v.description),
        reason: v.reason ?? "",
      }),
    );
    details.push({ desc: BadRequestSchema, value: create(BadRequestSchema, { fieldViolations }) });
  }
  return { message, details };
}

type WireDetail =
  | { desc: typeof ErrorInfoSchema; value: MessageShape<typeof ErrorInfoSchema> }
  | { desc: typeof RetryInfoSchema; value: MessageShape<typeof RetryInfoSchema> }
  | { desc: typeof BadRequestSchema; value: MessageShape<typeof BadRequestSchema> };

/** The grpc-js error for a ToolError: status code, message, and google.rpc.Status details. */
export function toServiceError(error: ToolError, domain: string): Partial<ServiceError> {
  const { message, details } = wireParts(error, domain);
  const statusProto = create(StatusSchema, {
    code: error.code,
    message,
    details: details.map((d) => anyPack(d.desc as DescMessage, d.value)),
  });
  const trailers = new Metadata();
  trailers.set(STATUS_DETAILS_KEY, Buffer.from(toBinary(StatusSchema, statusProto)));
  return { code: error.code, details: message, metadata: trailers };
}

/** What a caller learns from a failed call: the code plus the decoded google.rpc details. */
export interface CallFailure {
  readonly code: status;
  readonly message: string;
  readonly reason: string | undefined;
  readonly domain: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly fieldViolations: readonly FieldViolation[];
  /** google.rpc.ErrorInfo.metadata, e.g. the limit a refusal names. */
  readonly metadata: Readonly<Record<string, string>>;
}

export function decodeStatusDetails(error: Pick<ServiceError, "code" | "details" | "metadata">): CallFailure {
  let reason: string | undefined;
  let domain: string | undefined;
  let retryAfterMs: number | undefined;
  let fieldViolations: FieldViolation[] = [];
  let metadata: Record<string, string> = {};
  const raw = error.metadata?.get(STATUS_DETAILS_KEY)[0];
  if (raw instanceof Buffer) {
    const statusProto = fromBinary(StatusSchema, raw);
    for (const any of statusProto.details) {
      const info = anyUnpack(any, ErrorInfoSchema);
      if (info) {
        reason = info.reason;
        domain = info.domain;
        metadata = info.metadata;
        continue;
      }
      const retry = anyUnpack(any, RetryInfoSchema);
      if (retry?.retryDelay) {
        retryAfterMs = Number(retry.retryDelay.seconds) * 1000 + Math.round(retry.retryDelay.nanos / 1e6);
        continue;
      }
      const bad = anyUnpack(any, BadRequestSchema);
      if (bad) {
        fieldViolations = bad.fieldViolations.map((v: BadRequest_FieldViolation) => ({
          field: v.field,
          description: v.description,
          ...(v.reason ? { reason: v.reason } : {}),
        }));
      }
    }
  }
  return { code: error.code, message: error.details ?? "", reason, domain, retryAfterMs, fieldViolations, metadata };
}
