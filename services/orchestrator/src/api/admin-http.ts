// The orchestrator's HTTP port beside /metrics, /healthz and the Connect routes (served by
// serveTool): the live dashboard (static files, no build step) and the /api/* JSON API kept for
// existing users. Each /api route is one row naming the orchestrator.v1 method it stands for:
// its request is built from the path, query and body, runs through the method's own chain (auth
// and scope, contract validation, error mapping, metrics) exactly as over gRPC and Connect, and
// its answer is the response message's JSON.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  type DescField,
  type DescMessage,
  type DescMethod,
  fromJson,
  type JsonObject,
  type JsonValue,
  type Message,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { readAllBytes } from "@connectrpc/connect/protocol";
import { codeToHttpStatus } from "@connectrpc/connect/protocol-connect";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import {
  createLogger,
  type HttpRoute,
  INTERNAL_MESSAGE,
  type Logger,
  status,
  ToolError,
  type UnaryInvoker,
} from "@loopguard/tool-sdk";
import { redactText } from "../guard/redact.js";
import { isSessionState } from "../session/session-state.js";

export interface AdminHttpOptions {
  readonly log?: Logger;
  /** Folder with index.html, app.js, plots.js and style.css. */
  readonly dashboardDir?: URL;
}

const MAX_BODY_BYTES = 64 * 1024;
const DEFAULT_PAGE_SIZE = 50;
const MAX_PAGE_SIZE = 200;

// The only files served: a fixed table, so no request path ever reaches the file system.
const STATIC_FILES: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/index.html": { file: "index.html", type: "text/html; charset=utf-8" },
  "/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/plots.js": { file: "plots.js", type: "text/javascript; charset=utf-8" },
  "/style.css": { file: "style.css", type: "text/css; charset=utf-8" },
};

const PAGE_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

const invalid = (message: string, field?: string, description?: string) =>
  new ToolError(
    status.INVALID_ARGUMENT,
    "REQUEST_INVALID",
    message,
    field ? { fieldViolations: [{ field, description: description ?? message }] } : {},
  );

/** What the path, query and body of one /api request say. */
interface ApiInput {
  readonly id: string;
  readonly query: URLSearchParams;
  readonly body: JsonObject;
}

interface ApiRoute {
  readonly verb: "GET" | "POST";
  /** Path segments after /api/; ":id" matches a session id. */
  readonly path: readonly string[];
  readonly rpc: DescMethod;
  /** The request message's JSON; the default is the body as it came. */
  readonly request?: (input: ApiInput) => JsonObject;
  /** Refuse body fields the request message lacks (else they are ignored). */
  readonly strict?: boolean;
  /** The answer's status and body; the default is 200 with the response's JSON. */
  readonly reply?: (json: JsonObject) => { status?: number; body: JsonValue };
}

const { method } = OrchestratorService;

function stateOf(query: URLSearchParams): JsonObject {
  const raw = query.get("state");
  if (raw === null || raw === "") return {};
  const name = raw.toUpperCase().replace(/^SESSION_STATE_/, "");
  if (!isSessionState(name)) throw invalid(`state "${raw}" is not a session state`, "state", "not a session state");
  return { state: `SESSION_STATE_${name}` };
}

function pageSizeOf(query: URLSearchParams): number {
  const raw = query.get("limit");
  if (raw === null || raw === "") return DEFAULT_PAGE_SIZE;
  const limit = Number(raw);
  if (!/^\d+$/.test(raw) || limit < 1 || limit > MAX_PAGE_SIZE)
    throw invalid(
      `limit must be an integer in 1..${MAX_PAGE_SIZE}, got "${raw}"`,
      "limit",
      `must be 1..${MAX_PAGE_SIZE}`,
    );
  return limit;
}

const resolve =
  (approve: boolean) =>
  ({ body, id }: ApiInput) => ({ ...body, sessionId: id, approve });

/** The README's /api routes, each the orchestrator.v1 method it stands for. */
const ROUTES: readonly ApiRoute[] = [
  { verb: "GET", path: ["overview"], rpc: method.getOverview },
  // Tools not called yet have no latency: null, as the API always said.
  {
    verb: "GET",
    path: ["tools"],
    rpc: method.listToolStats,
    reply: (json) => ({
      body: { tools: (json.tools as JsonObject[]).map((t) => ({ p50Ms: null, p95Ms: null, ...t })) },
    }),
  },
  { verb: "GET", path: ["approvals"], rpc: method.listApprovals },
  {
    verb: "GET",
    path: ["sessions"],
    rpc: method.listSessions,
    request: ({ query }) => ({ ...stateOf(query), pageSize: pageSizeOf(query), pageToken: query.get("cursor") ?? "" }),
    reply: (json) => ({ body: { sessions: json.sessions ?? [], nextCursor: json.nextPageToken || null } }),
  },
  {
    verb: "POST",
    path: ["sessions"],
    rpc: method.startSession,
    strict: true,
    reply: (json) => ({ status: json.created ? 201 : 200, body: json }),
  },
  { verb: "GET", path: ["sessions", ":id"], rpc: method.getSessionDetail, request: ({ id }) => ({ sessionId: id }) },
  // The approval the human saw, named exactly: a stale one (another action, other arguments) is a 409.
  { verb: "POST", path: ["sessions", ":id", "approve"], rpc: method.resolveApproval, request: resolve(true) },
  { verb: "POST", path: ["sessions", ":id", "deny"], rpc: method.resolveApproval, request: resolve(false) },
  {
    verb: "POST",
    path: ["sessions", ":id", "cancel"],
    rpc: method.cancelSession,
    request: ({ body, id }) => ({ ...body, sessionId: id }),
  },
];

function matches(route: ApiRoute, parts: readonly string[]): string | undefined {
  if (route.path.length !== parts.length) return undefined;
  let id = "";
  for (const [i, segment] of route.path.entries()) {
    if (segment === ":id" && parts[i] !== "") id = parts[i]!;
    else if (segment !== parts[i]) return undefined;
  }
  return id;
}

const JSON_TYPE_OF_SCALAR: Partial<Record<ScalarType, string>> = {
  [ScalarType.STRING]: "a string",
  [ScalarType.BOOL]: "true or false",
  [ScalarType.BYTES]: "base64 text",
};

/** How a field that did not decode should have been written. */
function expected(field: DescField): string {
  if (field.fieldKind === "scalar") return `must be ${JSON_TYPE_OF_SCALAR[field.scalar] ?? "a number"}`;
  if (field.fieldKind === "list") return "must be a list";
  if (field.fieldKind === "enum") return "must be one of the enum's value names";
  return "must be an object";
}

/** The body's field that does not decode on its own, if one does not (protobuf-es names it only in its message). */
function undecodable(schema: DescMessage, json: JsonObject): DescField | undefined {
  for (const [key, value] of Object.entries(json)) {
    const field = schema.fields.find((f) => f.jsonName === key || f.name === key);
    if (!field) continue;
    try {
      fromJson(schema, { [key]: value });
    } catch {
      return field;
    }
  }
  return undefined;
}

function requestOf(route: ApiRoute, json: JsonObject): Message {
  try {
    return fromJson(route.rpc.input, json, { ignoreUnknownFields: !route.strict });
  } catch (error) {
    const message = `the request body is not a ${route.rpc.input.name}: ${(error as Error).message}`;
    const field = undecodable(route.rpc.input, json);
    throw field ? invalid(message, field.name, expected(field)) : invalid(message);
  }
}

async function bodyOf(req: IncomingMessage): Promise<JsonObject> {
  let bytes: Uint8Array;
  try {
    bytes = await readAllBytes(req, MAX_BODY_BYTES, req.headers["content-length"]);
  } catch (error) {
    if (error instanceof ConnectError && error.code === Code.ResourceExhausted) {
      throw new ToolError(
        status.INVALID_ARGUMENT,
        "REQUEST_TOO_LARGE",
        `the request body is larger than ${MAX_BODY_BYTES} bytes`,
      );
    }
    throw error;
  }
  const text = new TextDecoder().decode(bytes);
  if (text.trim() === "") return {};
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw invalid(`the request body is not valid JSON: ${(error as Error).message}`);
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) throw invalid("the request body must be a JSON object");
  return body as JsonObject;
}

function headersOf(req: IncomingMessage): Headers {
  const headers = new Headers();
  for (const [key, value] of Object.entries(req.headers)) {
    for (const v of Array.isArray(value) ? value : [value ?? ""]) headers.append(key, v);
  }
  return headers;
}

/** The API's one departure from Connect's table: a refused precondition is a conflict (409), as the README has always said. */
function httpStatusOf(error: ToolError): number {
  if (error.reason === "REQUEST_TOO_LARGE") return 413;
  if (error.code === status.FAILED_PRECONDITION) return 409;
  return codeToHttpStatus(error.code as number as Code);
}

function sendJson(res: ServerResponse, httpStatus: number, body: unknown, extra: Record<string, string> = {}): void {
  if (res.headersSent) return;
  res
    .writeHead(httpStatus, {
      "content-type": "application/json; charset=utf-8",
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
      ...extra,
    })
    .end(JSON.stringify(body));
}

/** The one place an error becomes an /api body; its texts may echo the request (a JSON parser's excerpt), so they are redacted. */
function sendError(res: ServerResponse, error: ToolError, extra: Record<string, string> = {}): void {
  const message = error.code === status.INTERNAL ? INTERNAL_MESSAGE : redactText(error.message);
  const fieldViolations = error.fieldViolations.map((v) => ({
    field: v.field,
    description: redactText(v.description),
  }));
  const headers: Record<string, string> = { ...extra };
  const httpStatus = httpStatusOf(error);
  if (httpStatus === 401) headers["www-authenticate"] = "Bearer";
  // The rest of an oversized body is never read: close rather than reuse the connection.
  if (httpStatus === 413) headers.connection = "close";
  if (error.retryable && error.retryAfterMs !== undefined)
    headers["retry-after"] = String(Math.max(1, Math.ceil(error.retryAfterMs / 1000)));
  sendJson(
    res,
    httpStatus,
    {
      error: {
        code: status[error.code],
        reason: error.reason,
        message,
        ...(fieldViolations.length > 0 ? { fieldViolations } : {}),
      },
    },
    headers,
  );
}

export function createAdminHttp(options: AdminHttpOptions = {}): HttpRoute {
  const log = options.log ?? createLogger({ service: "orchestrator", write: () => undefined });
  const dashboardDir = options.dashboardDir ?? new URL("../dashboard/", import.meta.url);

  async function route(req: IncomingMessage, res: ServerResponse, url: URL, invoke: UnaryInvoker): Promise<void> {
    const verb = req.method === "HEAD" ? "GET" : (req.method ?? "GET");
    let parts: string[];
    try {
      // "/api/sessions/" is "/api/sessions", as it always was.
      parts = url.pathname.slice("/api/".length).replace(/\/$/, "").split("/").map(decodeURIComponent);
    } catch {
      throw invalid(`the path ${url.pathname} is not valid percent-encoding`);
    }
    const found = ROUTES.flatMap((r) => {
      const id = matches(r, parts);
      return id === undefined ? [] : [{ route: r, id }];
    });
    if (found.length === 0) throw new ToolError(status.NOT_FOUND, "ROUTE_NOT_FOUND", `no API route ${url.pathname}`);
    const hit = found.find((f) => f.route.verb === verb);
    if (!hit) {
      const allowed = found.map((f) => f.route.verb).join(" or ");
      return sendJson(
        res,
        405,
        {
          error: {
            code: "UNIMPLEMENTED",
            reason: "METHOD_NOT_ALLOWED",
            message: `${req.method} is not allowed on ${url.pathname}; use ${allowed}`,
          },
        },
        { allow: allowed.replace(" or ", ", ") },
      );
    }
    const { route: r, id } = hit;
    const body = r.verb === "POST" ? await bodyOf(req) : {};
    const request = requestOf(r, r.request ? r.request({ id, query: url.searchParams, body }) : body);
    const gone = new AbortController();
    res.once("close", () => gone.abort());
    const response = await invoke(r.rpc, request, { headers: headersOf(req), signal: gone.signal });
    const json = toJson(r.rpc.output, response as Message, { alwaysEmitImplicit: true }) as JsonObject;
    const reply = r.reply?.(json) ?? { body: json };
    sendJson(res, reply.status ?? 200, reply.body);
  }

  async function api(req: IncomingMessage, res: ServerResponse, url: URL, invoke: UnaryInvoker): Promise<void> {
    try {
      await route(req, res, url, invoke);
    } catch (error) {
      if (error instanceof ToolError) return sendError(res, error);
      log.error("admin api request failed", {
        method: req.method ?? "",
        url: url.pathname,
        error_name: (error as Error)?.name ?? typeof error,
        error_message: (error as Error)?.message ?? "",
      });
      sendError(res, new ToolError(status.INTERNAL, "INTERNAL_ERROR", INTERNAL_MESSAGE));
    }
  }

  async function page(req: IncomingMessage, res: ServerResponse, entry: { file: string; type: string }): Promise<void> {
    try {
      const body = await readFile(new URL(entry.file, dashboardDir));
      res
        .writeHead(200, { "content-type": entry.type, "content-length": body.length, ...PAGE_HEADERS })
        .end(req.method === "HEAD" ? undefined : body);
    } catch (error) {
      log.error("dashboard file missing", { url: entry.file, error_name: (error as Error).name });
      res.writeHead(500, { "content-type": "text/plain" }).end("dashboard files are missing from this build\n");
    }
  }

  return (req, res, invoke) => {
    let url: URL;
    try {
      url = new URL(req.url ?? "/", "http://admin.invalid");
    } catch {
      return false;
    }
    if (url.pathname.startsWith("/api/")) {
      void api(req, res, url, invoke);
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
