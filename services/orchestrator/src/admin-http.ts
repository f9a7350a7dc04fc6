// The orchestrator's HTTP admin routes, beside /metrics and /healthz on the same port: the live
// dashboard (static files, no build step) and a JSON API. The API runs the gRPC API's own
// handlers and contract validation and answers with the Session message's JSON form, so the
// page, the CLI and gRPC clients see the same fields and the same refusals.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { create, type DescMessage, type DescService, fromJson, type JsonValue, type MessageShape, toJson } from "@bufbuild/protobuf";
import {
  CancelSessionRequestSchema,
  OrchestratorService,
  GetSessionRequestSchema,
  ResolveApprovalRequestSchema,
  SessionSchema,
  StartSessionRequestSchema,
  StartSessionResponseSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type Caller, type CallContext, createLogger, type FieldViolation, INTERNAL_MESSAGE, type Logger, servicePolicy, status, TokenVerifier, type ToolClient, ToolError, violationsOf } from "@loopguard/tool-sdk";
import type { JSONWebKeySet } from "jose";
import type { Registry } from "prom-client";
import { createOrchestratorHandlers, storeUnavailable, toProtoSession } from "./api-handlers.js";
import type { LogTail } from "./log-tail.js";
import { type Orchestrator, OrchestratorError } from "./orchestrator.js";
import { redactText } from "./redact.js";
import { isSessionState, type SessionState } from "./session-state.js";
import { type SessionRecord, StoreUnavailableError } from "./session-store.js";

export interface AdminHttpOptions {
  readonly orchestrator: Orchestrator;
  /** The registry the tool clients' metrics live in (ServerMetrics.registry). */
  readonly registry: Registry;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  /** Public keys that verify operators' tokens (audience "orchestrator"). */
  readonly publicKeys: JSONWebKeySet;
  readonly logTail?: LogTail;
  readonly log?: Logger;
  /** Folder with index.html, app.js and style.css. */
  readonly dashboardDir?: URL;
}

export type AdminHttp = (req: IncomingMessage, res: ServerResponse) => boolean;

const DEFAULT_PAGE_SIZE = 50;
const MAX_PAGE_SIZE = 200;
const MAX_BODY_BYTES = 64 * 1024;
const APPROVALS_SHOWN = 200;

// The only files served: a fixed table, so no request path ever reaches the file system.
const STATIC_FILES: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/index.html": { file: "index.html", type: "text/html; charset=utf-8" },
  "/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/style.css": { file: "style.css", type: "text/css; charset=utf-8" },
};

const PAGE_HEADERS = {
  "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

const SCOPE_READ = "sessions:read";
const SCOPE_WRITE = "sessions:write";
const SCOPE_APPROVE = "approvals:write";

/** Refusal of one API request: an HTTP status plus the gRPC-style code and reason it stands for. */
class ApiError extends Error {
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

const badRequest = (message: string, violations: readonly FieldViolation[] = []) => new ApiError(400, "INVALID_ARGUMENT", "REQUEST_INVALID", message, violations);

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

function apiErrorOf(error: unknown): ApiError | undefined {
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

function sendJson(res: ServerResponse, httpStatus: number, body: unknown, extra: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res
    .writeHead(httpStatus, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store", "x-content-type-options": "nosniff", ...extra })
    .end(JSON.stringify(body));
}

/** The one place an error becomes an HTTP body; its texts may echo the request (a JSON parser's excerpt), so they are redacted. */
function sendError(res: ServerResponse, error: ApiError, extra: Record<string, string> = {}): void {
  sendJson(
    res,
    error.httpStatus,
    { error: { code: error.code, reason: error.reason, message: redactText(error.message), ...(error.fieldViolations.length > 0 ? { fieldViolations: error.fieldViolations.map((v) => ({ field: v.field, description: redactText(v.description) })) } : {}) } },
    extra,
  );
}

async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
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

function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw badRequest(`${field} must be a string`, [{ field, description: "must be a string" }]);
  return value;
}

/** Contract validation, as the gRPC pipeline does it before any handler runs. */
function validated<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): MessageShape<Desc> {
  const violations = violationsOf(schema, message);
  if (violations.length > 0) throw badRequest(`invalid ${schema.name}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`, violations);
  return message;
}

export function sessionJson(s: SessionRecord, options: { readonly withTask?: boolean } = {}): JsonValue {
  return toJson(SessionSchema, create(SessionSchema, toProtoSession(s, options)), { alwaysEmitImplicit: true });
}

const listed = (s: SessionRecord) => sessionJson(s, { withTask: false });

function parseState(raw: string | null): SessionState | undefined {
  if (raw === null || raw === "") return undefined;
  const name = raw.toUpperCase().replace(/^SESSION_STATE_/, "");
  if (!isSessionState(name)) throw badRequest(`state "${raw}" is not a session state`, [{ field: "state", description: "not a session state" }]);
  return name;
}

function parseLimit(raw: string | null): number {
  if (raw === null || raw === "") return DEFAULT_PAGE_SIZE;
  const limit = Number(raw);
  if (!/^\d+$/.test(raw) || limit < 1 || limit > MAX_PAGE_SIZE) {
    throw badRequest(`limit must be an integer in 1..${MAX_PAGE_SIZE}, got "${raw}"`, [{ field: "limit", description: `must be 1..${MAX_PAGE_SIZE}` }]);
  }
  return limit;
}

function budgetRows(s: SessionRecord): { name: string; used: number; limit: number; left: number }[] {
  const wallClock = Math.max(0, (s.stopReason ? s.updatedAt : Date.now()) - s.usage.startedAt);
  const row = (name: string, used: number, limit: number) => ({ name, used, limit, left: Math.max(0, limit - used) });
  return [
    row("steps", s.usage.steps, s.budget.maxSteps),
    row("tool_calls", s.usage.toolCalls, s.budget.maxToolCalls),
    row("tokens", s.usage.tokens, s.budget.maxTokens),
    row("cost_micros", s.usage.costMicros, s.budget.maxCostMicros),
    row("wall_clock_ms", wallClock, s.budget.deadlineMs),
  ];
}

type Buckets = Map<number, number>;

/** Prometheus' histogram_quantile over cumulative buckets: linear inside the bucket holding the rank. */
export function quantileOf(buckets: Buckets, q: number): number | null {
  const bounds = [...buckets.keys()].sort((a, b) => a - b);
  const total = buckets.get(Number.POSITIVE_INFINITY) ?? 0;
  if (total === 0) return null;
  const rank = q * total;
  let previousBound = 0;
  let previousCount = 0;
  for (const bound of bounds) {
    const count = buckets.get(bound) ?? 0;
    if (count >= rank) {
      if (!Number.isFinite(bound)) return previousBound;
      if (count === previousCount) return bound;
      return previousBound + (bound - previousBound) * ((rank - previousCount) / (count - previousCount));
    }
    previousBound = bound;
    previousCount = count;
  }
  return previousBound;
}

interface ToolStats {
  readonly tool: string;
  readonly service: string;
  readonly breaker: string;
  readonly calls: number;
  readonly p50Ms: number | null;
  readonly p95Ms: number | null;
  /** Share of calls the tool did not answer live (errors, fallbacks, rejections). */
  readonly errorRate: number;
  readonly fallbacksServed: number;
  readonly outcomes: Record<string, number>;
}

type MetricValues = { value: number; labels: Record<string, string | number | undefined>; metricName?: string }[];

async function valuesOf(registry: Registry, name: string): Promise<MetricValues> {
  const metric = registry.getSingleMetric(name);
  return metric ? ((await metric.get()).values as MetricValues) : [];
}

/** Per tool, since this process started: latency from grpc_client_handling_seconds, outcomes from loopguard_tool_client_calls_total. */
async function toolStats(registry: Registry, clients: ReadonlyMap<string, ToolClient<DescService>>): Promise<ToolStats[]> {
  const [latency, calls] = await Promise.all([valuesOf(registry, "grpc_client_handling_seconds"), valuesOf(registry, "loopguard_tool_client_calls_total")]);
  const bucketsByService = new Map<string, Buckets>();
  for (const v of latency) {
    if (v.metricName !== "grpc_client_handling_seconds_bucket") continue;
    const service = String(v.labels.grpc_service);
    const le = v.labels.le === "+Inf" ? Number.POSITIVE_INFINITY : Number(v.labels.le);
    const buckets = bucketsByService.get(service) ?? new Map<number, number>();
    buckets.set(le, (buckets.get(le) ?? 0) + v.value);
    bucketsByService.set(service, buckets);
  }
  const outcomesByTool = new Map<string, Record<string, number>>();
  for (const v of calls) {
    const tool = String(v.labels.tool);
    const outcome = String(v.labels.outcome);
    const outcomes = outcomesByTool.get(tool) ?? {};
    outcomes[outcome] = (outcomes[outcome] ?? 0) + v.value;
    outcomesByTool.set(tool, outcomes);
  }
  return [...clients.values()].map((client) => {
    const buckets = bucketsByService.get(client.service.typeName) ?? new Map<number, number>();
    const outcomes = outcomesByTool.get(client.tool) ?? {};
    const total = Object.values(outcomes).reduce((a, b) => a + b, 0);
    const ms = (seconds: number | null) => (seconds === null ? null : Math.round(seconds * 10_000) / 10);
    return {
      tool: client.tool,
      service: client.service.typeName,
      breaker: client.breakerState,
      calls: total,
      p50Ms: ms(quantileOf(buckets, 0.5)),
      p95Ms: ms(quantileOf(buckets, 0.95)),
      errorRate: total === 0 ? 0 : (total - (outcomes.ok ?? 0)) / total,
      fallbacksServed: (outcomes.fallback_cache ?? 0) + (outcomes.fallback_degraded ?? 0),
      outcomes,
    };
  });
}

function bearerToken(req: IncomingMessage): string | undefined {
  const match = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "");
  return match?.[1];
}

export function createAdminHttp(options: AdminHttpOptions): AdminHttp {
  const { orchestrator, registry, clients, logTail } = options;
  const log = options.log ?? createLogger({ service: "orchestrator", write: () => undefined });
  const verifier = new TokenVerifier(options.publicKeys, servicePolicy(OrchestratorService).toolName);
  const handlers = createOrchestratorHandlers(orchestrator);
  const dashboardDir = options.dashboardDir ?? new URL("../dashboard/", import.meta.url);

  async function authorise(req: IncomingMessage, scope: string): Promise<Caller> {
    const token = bearerToken(req);
    if (!token) throw new ApiError(401, "UNAUTHENTICATED", "CREDENTIALS_INVALID", "missing bearer token in the Authorization header");
    let caller: Caller;
    try {
      caller = await verifier.verify(token);
    } catch {
      throw new ApiError(401, "UNAUTHENTICATED", "CREDENTIALS_INVALID", "the bearer token does not verify (expired, malformed, not signed by a trusted key, or issued for another service)");
    }
    if (!caller.scopes.has(scope)) throw new ApiError(403, "PERMISSION_DENIED", "SCOPE_MISSING", `this request requires scope "${scope}"`);
    return caller;
  }

  function callContext(caller: Caller): CallContext {
    return { signal: new AbortController().signal, deadline: undefined, caller, traceId: "", log };
  }

  async function sessionDetail(id: string): Promise<unknown> {
    validated(GetSessionRequestSchema, create(GetSessionRequestSchema, { sessionId: id }));
    const s = await orchestrator.get(id);
    const [trail, steps] = await Promise.all([orchestrator.store.auditTrail(id), orchestrator.store.steps(id)]);
    const session = sessionJson(s) as { traceId: string };
    return {
      session,
      budget: budgetRows(s),
      transitions: trail.map((a) => ({
        version: a.version,
        from: a.from,
        to: a.to,
        at: new Date(a.at).toISOString(),
        reason: a.reason,
        tool: a.tool,
        outcome: a.outcome,
        argsHash: a.argsHash,
        expectedTimeoutMs: a.expectedTimeoutMs,
      })),
      steps: steps.map((step) => ({ step: step.step, at: new Date(step.at).toISOString(), record: step.payload })),
      logs: logTail?.linesFor(s.id, session.traceId) ?? [],
    };
  }

  async function route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? "GET";
    let parts: string[];
    try {
      parts = url.pathname.slice("/api/".length).split("/").map(decodeURIComponent);
    } catch {
      throw badRequest(`the path ${url.pathname} is not valid percent-encoding`);
    }
    const [resource, id, action, ...rest] = parts;
    const isGet = method === "GET" || method === "HEAD";
    const allow = (allowed: string) => new ApiError(405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED", `${method} is not allowed on ${url.pathname}; use ${allowed}`);

    if (resource === "overview" && id === undefined) {
      if (!isGet) throw allow("GET");
      await authorise(req, SCOPE_READ);
      const counts = await orchestrator.store.countByState();
      const total = Object.values(counts).reduce((a, b) => a + b, 0);
      return sendJson(res, 200, { counts, total, approvalsWaiting: counts.AWAITING_APPROVAL, activeHere: orchestrator.activeCount(), at: new Date().toISOString() });
    }
    if (resource === "tools" && id === undefined) {
      if (!isGet) throw allow("GET");
      await authorise(req, SCOPE_READ);
      return sendJson(res, 200, { tools: await toolStats(registry, clients) });
    }
    if (resource === "approvals" && id === undefined) {
      if (!isGet) throw allow("GET");
      await authorise(req, SCOPE_READ);
      const page = await orchestrator.list("AWAITING_APPROVAL", APPROVALS_SHOWN, undefined);
      return sendJson(res, 200, { approvals: page.sessions.map(listed), more: page.nextCursor !== null });
    }
    if (resource !== "sessions" || rest.length > 0) throw new ApiError(404, "NOT_FOUND", "ROUTE_NOT_FOUND", `no API route ${url.pathname}`);

    if (id === undefined || id === "") {
      if (isGet) {
        await authorise(req, SCOPE_READ);
        const state = parseState(url.searchParams.get("state"));
        const limit = parseLimit(url.searchParams.get("limit"));
        const cursor = url.searchParams.get("cursor") || undefined;
        if (cursor && cursor.length > 256) throw badRequest("cursor is too long", [{ field: "cursor", description: "at most 256 characters" }]);
        const page = await orchestrator.list(state, limit, cursor);
        return sendJson(res, 200, { sessions: page.sessions.map(listed), nextCursor: page.nextCursor });
      }
      if (method !== "POST") throw allow("GET or POST");
      const caller = await authorise(req, SCOPE_WRITE);
      const body = await readJsonObject(req);
      let request: MessageShape<typeof StartSessionRequestSchema>;
      try {
        request = fromJson(StartSessionRequestSchema, body as JsonValue);
      } catch (error) {
        throw badRequest(`the request body is not a StartSessionRequest: ${(error as Error).message}`);
      }
      const response = await handlers.startSession(validated(StartSessionRequestSchema, request), callContext(caller));
      const json = toJson(StartSessionResponseSchema, create(StartSessionResponseSchema, response), { alwaysEmitImplicit: true }) as { created: boolean };
      return sendJson(res, json.created ? 201 : 200, json);
    }

    if (action === undefined) {
      if (!isGet) throw allow("GET");
      await authorise(req, SCOPE_READ);
      return sendJson(res, 200, await sessionDetail(id));
    }
    if (method !== "POST") throw allow("POST");
    if (action === "approve" || action === "deny") {
      const caller = await authorise(req, SCOPE_APPROVE);
      const body = await readJsonObject(req);
      // The approval the human saw, named exactly: a stale one (another action, other arguments) is a 409.
      const approvalId = optionalString(body, "approvalId") ?? "";
      const argumentsHash = optionalString(body, "argumentsHash") ?? "";
      const request = validated(
        ResolveApprovalRequestSchema,
        create(ResolveApprovalRequestSchema, {
          sessionId: id,
          approvalId,
          argumentsHash,
          approve: action === "approve",
          approver: optionalString(body, "approver") ?? "",
          reason: optionalString(body, "reason") ?? "",
        }),
      );
      const { session } = await handlers.resolveApproval(request, callContext(caller));
      return sendJson(res, 200, { session: toJson(SessionSchema, create(SessionSchema, session), { alwaysEmitImplicit: true }) });
    }
    if (action === "cancel") {
      const caller = await authorise(req, SCOPE_WRITE);
      const body = await readJsonObject(req);
      const request = validated(CancelSessionRequestSchema, create(CancelSessionRequestSchema, { sessionId: id, reason: optionalString(body, "reason") ?? "" }));
      const { session } = await handlers.cancelSession(request, callContext(caller));
      return sendJson(res, 200, { session: toJson(SessionSchema, create(SessionSchema, session), { alwaysEmitImplicit: true }) });
    }
    throw new ApiError(404, "NOT_FOUND", "ROUTE_NOT_FOUND", `no API route ${url.pathname}`);
  }

  async function api(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    try {
      await route(req, res, url);
    } catch (error) {
      const known = apiErrorOf(error);
      if (known) {
        const extra: Record<string, string> = {};
        if (known.httpStatus === 401) extra["www-authenticate"] = "Bearer";
        // The rest of an oversized body is never read: close rather than reuse the connection.
        if (known.httpStatus === 413) extra.connection = "close";
        if (known.retryAfterMs !== undefined) extra["retry-after"] = String(Math.max(1, Math.ceil(known.retryAfterMs / 1000)));
        sendError(res, known, extra);
        return;
      }
      log.error("admin api request failed", { method: req.method ?? "", url: url.pathname, error_name: (error as Error)?.name ?? typeof error, error_message: (error as Error)?.message ?? "" });
      sendError(res, new ApiError(500, "INTERNAL", "INTERNAL_ERROR", INTERNAL_MESSAGE));
    }
  }

  async function page(req: IncomingMessage, res: ServerResponse, entry: { file: string; type: string }): Promise<void> {
    try {
      const body = await readFile(new URL(entry.file, dashboardDir));
      res.writeHead(200, { "content-type": entry.type, "content-length": body.length, ...PAGE_HEADERS }).end(req.method === "HEAD" ? undefined : body);
    } catch (error) {
      log.error("dashboard file missing", { url: entry.file, error_name: (error as Error).name });
      res.writeHead(500, { "content-type": "text/plain" }).end("dashboard files are missing from this build\n");
    }
  }

  return (req, res) => {
    let url: URL;
    try {
      url = new URL(req.url ?? "/", "http://admin.invalid");
    } catch {
      return false;
    }
    if (url.pathname.startsWith("/api/")) {
      void api(req, res, url);
      return true;
    }
    const entry = STATIC_FILES[url.pathname];
    if (entry && (req.method === "GET" || req.method === "HEAD")) {
      void page(req, res, entry);
      return true;
    }
    return false;
  };
}
