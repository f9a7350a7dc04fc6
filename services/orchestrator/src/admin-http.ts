// The orchestrator's HTTP admin routes, beside /metrics and /healthz on the same port: the live
// dashboard (static files, no build step) and a JSON API. The API runs the gRPC API's own
// handlers and contract validation and answers with the Session message's JSON form, so the
// page, the CLI and gRPC clients see the same fields and the same refusals.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { create, type DescService, fromJson, type JsonValue, type MessageShape, toJson } from "@bufbuild/protobuf";
import {
  CancelSessionRequestSchema,
  OrchestratorService,
  GetSessionRequestSchema,
  ResolveApprovalRequestSchema,
  SessionSchema,
  StartSessionRequestSchema,
  StartSessionResponseSchema,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type Caller, type CallContext, createLogger, INTERNAL_MESSAGE, type Logger, servicePolicy, TokenVerifier, type ToolClient } from "@loopguard/tool-sdk";
import type { JSONWebKeySet } from "jose";
import type { Registry } from "prom-client";
import { ApiError, apiErrorOf, badRequest, optionalString, readJsonObject, sendError, sendJson, validated } from "./admin-json.js";
import { createOrchestratorHandlers, toProtoSession } from "./api-handlers.js";
import type { LogTail } from "./log-tail.js";
import type { Orchestrator } from "./orchestrator.js";
import { isSessionState, type SessionState } from "./session-state.js";
import type { SessionRecord } from "./session-store.js";
import { toolStats } from "./tool-stats.js";

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
