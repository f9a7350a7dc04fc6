// What the orchestrator's HTTP port serves beside /metrics, /healthz and the Connect routes of
// loopguard.orchestrator.v1 (both serveTool's): the live dashboard's files (no build step), and a
// 404 for each route of the removed /api JSON API naming the Connect method that replaced it.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMethod } from "@bufbuild/protobuf";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createLogger, type HttpRoute, type Logger, redactText } from "@loopguard/tool-sdk";
import { SESSION_STATES, TERMINAL_STATES } from "../session/session-state.js";

export interface HttpPortOptions {
  readonly log?: Logger;
  /** Folder with index.html, app.js, plots.js and style.css (states.js is generated). */
  readonly dashboardDir?: URL;
}

// The only files served: a fixed table, so no request path ever reaches the file system.
const STATIC_FILES: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/index.html": { file: "index.html", type: "text/html; charset=utf-8" },
  "/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/plots.js": { file: "plots.js", type: "text/javascript; charset=utf-8" },
  "/style.css": { file: "style.css", type: "text/css; charset=utf-8" },
};

// The state list the dashboard shows, written from the state machine so the page never keeps a copy.
export const STATES_MODULE = Buffer.from(
  `export const STATES = ${JSON.stringify(SESSION_STATES)};\n` +
    `export const TERMINAL = new Set(${JSON.stringify(TERMINAL_STATES)});\n`,
);

const PAGE_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

const { method } = OrchestratorService;

/** The removed /api routes (verb, path with ":id" for a session id), each the method that replaced it. */
const REMOVED_API: readonly (readonly [verb: string, path: string, replacedBy: DescMethod])[] = [
  ["GET", "/api/overview", method.getOverview],
  ["GET", "/api/tools", method.listToolStats],
  ["GET", "/api/approvals", method.listApprovals],
  ["GET", "/api/sessions", method.listSessions],
  ["POST", "/api/sessions", method.startSession],
  ["GET", "/api/sessions/:id", method.getSessionDetail],
  ["POST", "/api/sessions/:id/approve", method.resolveApproval],
  ["POST", "/api/sessions/:id/deny", method.resolveApproval],
  ["POST", "/api/sessions/:id/cancel", method.cancelSession],
];

/** The Connect path of a method of the service: what a client POSTs to. */
export const connectPath = (m: DescMethod): string => `/${m.parent.typeName}/${m.name}`;

/** The method that replaced a removed /api route, if the path (verb aside when only one route has it) was one. */
export function replacementOf(verb: string, pathname: string): DescMethod | undefined {
  // "/api/sessions/" was "/api/sessions".
  const parts = pathname.replace(/\/$/, "").split("/");
  const same = REMOVED_API.filter(([, path]) => {
    const segments = path.split("/");
    return (
      segments.length === parts.length && segments.every((s, i) => s === parts[i] || (s === ":id" && Boolean(parts[i])))
    );
  });
  return (same.find(([v]) => v === verb) ?? (same.length === 1 ? same[0] : undefined))?.[2];
}

function removedApi(req: IncomingMessage, res: ServerResponse, pathname: string): void {
  const replacedBy = replacementOf(req.method === "HEAD" ? "GET" : (req.method ?? "GET"), pathname);
  // The path as asked, masked: anyone may ask, and a path may hold a phone or an id card.
  const asked = redactText(pathname);
  const body = {
    code: "not_found",
    message: replacedBy
      ? `${req.method} ${asked} was removed: POST ${connectPath(replacedBy)} instead (Connect, JSON body)`
      : `${asked}: the /api routes were removed; the HTTP API is POST /${OrchestratorService.typeName}/<Method>`,
    ...(replacedBy ? { replacedBy: `${OrchestratorService.typeName}.${replacedBy.name}` } : {}),
  };
  res
    .writeHead(404, {
      "content-type": "application/json; charset=utf-8",
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    })
    .end(JSON.stringify(body));
}

/** The dashboard's files and the removed /api routes' answers; every other path goes on to serveTool's. */
export function createHttpPort(options: HttpPortOptions = {}): HttpRoute {
  const log = options.log ?? createLogger({ service: "orchestrator", write: () => undefined });
  const dashboardDir = options.dashboardDir ?? new URL("../../dashboard/", import.meta.url);

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

  return (req, res) => {
    let url: URL;
    try {
      url = new URL(req.url ?? "/", "http://orchestrator.invalid");
    } catch {
      return false;
    }
    if (url.pathname === "/api" || url.pathname.startsWith("/api/")) {
      req.resume();
      removedApi(req, res, url.pathname);
      return true;
    }
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    if (url.pathname === "/states.js") {
      res
        .writeHead(200, {
          "content-type": "text/javascript; charset=utf-8",
          "content-length": STATES_MODULE.length,
          ...PAGE_HEADERS,
        })
        .end(req.method === "HEAD" ? undefined : STATES_MODULE);
      return true;
    }
    const entry = STATIC_FILES[url.pathname];
    if (entry) {
      void page(req, res, entry);
      return true;
    }
    return false;
  };
}
