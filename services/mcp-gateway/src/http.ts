// Streamable HTTP, stateless: each POST /mcp gets its own server and transport, bound to the
// bearer token it came with, which goes on to the orchestrator as the caller's credential. The
// token is verified first, as the orchestrator verifies it (the same public keys and provider), so
// no bearer, or one the orchestrator would refuse: 401 before anything runs or is read.
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { MAX_TASK_BYTES } from "@loopguard/orchestrator/start-request";
import { CredentialsError, httpServerOptions, type TokenVerifier } from "@loopguard/tool-sdk";
import { createGatewayServer, type GatewayDeps } from "./gateway.js";

export const MCP_PATH = "/mcp";
const BEARER = /^Bearer ([A-Za-z0-9._~+/-]+=*)$/;

function jsonRpcError(
  res: ServerResponse,
  httpStatus: number,
  message: string,
  headers: Record<string, string> = {},
  code = -32000,
): void {
  // A body not read to its end is not drained: the connection closes, and frees its place (maxConnections).
  const close = res.req.complete ? {} : { connection: "close" };
  res.writeHead(httpStatus, { "content-type": "application/json", ...close, ...headers });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

/** Requests one batch may hold. */
const MAX_BATCH = 32;
/**
 * The largest body a batch the gateway takes can be: a request carries at most one task of
 * MAX_TASK_BYTES of JSON, and twice that leaves room for its envelope and layout (1 MiB).
 */
const MAX_BODY_BYTES = MAX_BATCH * 2 * MAX_TASK_BYTES;

/** The request's body, or undefined once it is past `limit` bytes (the rest is not read). */
async function bodyOf(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** An id two requests of a batch share: the SDK would run both and answer one (it keys answers by id). */
function sharedId(message: unknown): unknown {
  if (!Array.isArray(message)) return undefined;
  const seen = new Set<string>();
  for (const request of message) {
    const id = (request as { id?: unknown } | null)?.id;
    // No id (a notification, unanswered) or one neither string nor number (the SDK refuses it, as alone).
    if (typeof id !== "string" && typeof id !== "number") continue;
    const key = JSON.stringify(id);
    if (seen.has(key)) return id;
    seen.add(key);
  }
  return undefined;
}

export interface McpHttp {
  readonly server: HttpServer;
  /** host:port it listens on. */
  readonly address: string;
  close(): Promise<void>;
}

export interface McpHttpDeps extends Omit<GatewayDeps, "tokenFor"> {
  /** Verifies each bearer as the orchestrator will (callerVerifier for audience "orchestrator"). */
  readonly verifier: Pick<TokenVerifier, "verify">;
}

/** Why `verifier` refuses `token`, or undefined when it takes it. */
async function refusalOf(verifier: McpHttpDeps["verifier"], token: string): Promise<string | undefined> {
  try {
    await verifier.verify(token);
    return undefined;
  } catch (error) {
    if (error instanceof CredentialsError) return error.message;
    throw error;
  }
}

/** Serves MCP on host:port, to at most `maxConnections` connections at once (more are closed unanswered). */
export async function serveMcpHttp(
  deps: McpHttpDeps,
  host: string,
  port: number,
  maxConnections: number,
): Promise<McpHttp> {
  const loopback = host === "127.0.0.1" || host === "localhost" || host === "::1";
  let allowedHosts: string[] = [];
  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    // A request target no URL can be made of (`POST //[`) is the client's mistake, not the gateway's failure.
    if (!URL.canParse(req.url ?? "/", "http://gateway"))
      return jsonRpcError(res, 400, `bad request: the target is no URL path; the MCP endpoint is ${MCP_PATH}`);
    if (new URL(req.url ?? "/", "http://gateway").pathname !== MCP_PATH)
      return jsonRpcError(res, 404, `not found: the MCP endpoint is ${MCP_PATH}`);
    // Stateless: no server-sent stream to resume and no session to end.
    if (req.method !== "POST")
      return jsonRpcError(res, 405, "method not allowed: POST JSON-RPC to this endpoint", { allow: "POST" });
    const token = BEARER.exec(req.headers.authorization ?? "")?.[1];
    if (!token)
      return jsonRpcError(res, 401, "missing bearer token: send Authorization: Bearer <token for the orchestrator>", {
        "www-authenticate": 'Bearer realm="loopguard"',
      });
    const refused = await refusalOf(deps.verifier, token);
    if (refused !== undefined)
      return jsonRpcError(res, 401, `bearer token refused: ${refused}; send a current token for the orchestrator`, {
        "www-authenticate": 'Bearer realm="loopguard", error="invalid_token"',
      });
    // The body is read here, not by the SDK, to refuse a batch before any of its calls starts.
    let parsed: unknown;
    if (/^application\/json/i.test(req.headers["content-type"] ?? "")) {
      const encoding = req.headers["content-encoding"] ?? "identity";
      if (encoding !== "identity")
        return jsonRpcError(
          res,
          415,
          `unsupported content-encoding "${encoding.slice(0, 32)}": send the body uncompressed`,
        );
      const body = await bodyOf(req, MAX_BODY_BYTES);
      if (!body) return jsonRpcError(res, 413, `payload too large: the body is over ${MAX_BODY_BYTES} bytes`);
      try {
        parsed = JSON.parse(body.toString("utf8"));
      } catch {
        return jsonRpcError(res, 400, "parse error: the body is not JSON", {}, -32700);
      }
      if (Array.isArray(parsed) && parsed.length > MAX_BATCH)
        return jsonRpcError(res, 400, `invalid request: a batch holds at most ${MAX_BATCH} requests`, {}, -32600);
      if (sharedId(parsed) !== undefined)
        return jsonRpcError(
          res,
          400,
          "invalid request: two requests of the batch share one id; each needs its own, so that each gets its answer",
          {},
          -32600,
        );
    }
    const server = createGatewayServer({ ...deps, tokenFor: async () => token });
    // On loopback, refuse other Host headers (DNS rebinding from a browser page).
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
      ...(loopback ? { enableDnsRebindingProtection: true, allowedHosts } : {}),
    });
    res.on("close", () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, parsed);
  };
  const server = createServer(httpServerOptions(), (req, res) => {
    handle(req, res).catch((error: unknown) => {
      // A client that went away before its request was read is its own doing, not the gateway's failure.
      if (!req.complete && (req.destroyed || res.destroyed)) {
        deps.log.debug("mcp http request abandoned by its client", { error_name: (error as Error).name });
        return;
      }
      deps.log.error("mcp http request failed", { error_name: (error as Error).name });
      if (!res.headersSent) jsonRpcError(res, 500, "internal error");
    });
  });
  server.maxConnections = maxConnections;
  await new Promise<void>((listening, failed) => {
    server.once("error", failed);
    server.listen(port, host, () => listening());
  });
  const bound = (server.address() as AddressInfo).port;
  allowedHosts = [`127.0.0.1:${bound}`, `localhost:${bound}`, `[::1]:${bound}`];
  return {
    server,
    address: `${host}:${bound}`,
    close: () => new Promise((closed) => server.close(() => closed())),
  };
}
