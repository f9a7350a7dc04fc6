// JSON over HTTP for the admin API: its refusals (an HTTP status plus the gRPC-style code and
// reason they stand for), the one table from gRPC codes to HTTP statuses, and request bodies.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { type FieldViolation, INTERNAL_MESSAGE, status, ToolError, violationsOf } from "@loopguard/tool-sdk";
import { storeUnavailable } from "./api-handlers.js";
import { OrchestratorError } from "./orchestrator.js";
import { redactText } from "./redact.js";
import { StoreUnavailableError } from "./session-store.js";

const MAX_BODY_BYTES = 64 * 1024;

/** Refusal of one API request: an HTTP status plus the gRPC-style code and reason it stands for. */
export class ApiError extends Error {
  constructor(
    readonly httpStatus: number,
    readonly code: string,
    readonly reason: string,
    message: string,
    readonly fieldViolations: readonly FieldViolation[] = [],
    /** Sent as Retry-After (whole seconds) on a refusal worth retrying. */
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}

export const badRequest = (message: string, violations: readonly FieldViolation[] = []) => new ApiError(400, "INVALID_ARGUMENT", "REQUEST_INVALID", message, violations);

const HTTP_STATUS_OF: Partial<Record<status, number>> = {
  [status.INVALID_ARGUMENT]: 400,
  [status.OUT_OF_RANGE]: 400,
  [status.UNAUTHENTICATED]: 401,
  [status.PERMISSION_DENIED]: 403,
  [status.NOT_FOUND]: 404,
  [status.ALREADY_EXISTS]: 409,
  [status.FAILED_PRECONDITION]: 409,
  [status.ABORTED]: 409,
  [status.RESOURCE_EXHAUSTED]: 429,
  [status.UNAVAILABLE]: 503,
  [status.DEADLINE_EXCEEDED]: 504,
};

export function apiErrorOf(error: unknown): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (error instanceof ToolError) {
    const message = error.code === status.INTERNAL ? INTERNAL_MESSAGE : error.message;
    return new ApiError(HTTP_STATUS_OF[error.code] ?? 500, status[error.code], error.reason, message, error.fieldViolations, error.retryable ? error.retryAfterMs : undefined);
  }
  if (error instanceof StoreUnavailableError) return apiErrorOf(storeUnavailable(error));
  if (error instanceof OrchestratorError) {
    if (error.reason === "SESSION_NOT_FOUND") return new ApiError(404, "NOT_FOUND", error.reason, error.message);
    if (error.reason === "UNKNOWN_POLICY") return badRequest(error.message, [{ field: "policy", description: error.message }]);
    return new ApiError(409, "FAILED_PRECONDITION", error.reason, error.message);
  }
  // Stores throw RangeError for a malformed cursor or limit.
  if (error instanceof RangeError) return badRequest(error.message);
  return undefined;
}

export function sendJson(res: ServerResponse, httpStatus: number, body: unknown, extra: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res
    .writeHead(httpStatus, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store", "x-content-type-options": "nosniff", ...extra })
    .end(JSON.stringify(body));
}

/** The one place an error becomes an HTTP body; its texts may echo the request (a JSON parser's excerpt), so they are redacted. */
export function sendError(res: ServerResponse, error: ApiError, extra: Record<string, string> = {}): void {
  sendJson(
    res,
    error.httpStatus,
    { error: { code: error.code, reason: error.reason, message: redactText(error.message), ...(error.fieldViolations.length > 0 ? { fieldViolations: error.fieldViolations.map((v) => ({ field: v.field, description: redactText(v.description) })) } : {}) } },
    extra,
  );
}

export async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ApiError(413, "INVALID_ARGUMENT", "REQUEST_TOO_LARGE", `the request body is larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw badRequest(`the request body is not valid JSON: ${(error as Error).message}`);
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) throw badRequest("the request body must be a JSON object");
  return body as Record<string, unknown>;
}

export function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw badRequest(`${field} must be a string`, [{ field, description: "must be a string" }]);
  return value;
}

/** Contract validation, as the gRPC pipeline does it before any handler runs. */
export function validated<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): MessageShape<Desc> {
  const violations = violationsOf(schema, message);
  if (violations.length > 0) throw badRequest(`invalid ${schema.name}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`, violations);
  return message;
}
