// Streamable HTTP, stateless: each POST /mcp gets its own server and transport, bound to the
// bearer token it came with, which goes on to the orchestrator as the caller's credential (the
// orchestrator verifies it; the gateway holds no key). No bearer: 401 before anything runs.
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createGatewayServer, type GatewayDeps } from "./gateway.js";

export const MCP_PATH = "/mcp";
const BEARER = /^Bearer ([A-Za-z0-9._~+/-]+=*)$/;

function jsonRpcError(
  res: ServerResponse,
  httpStatus: number,
  message: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(httpStatus, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
}

export interface McpHttp {
  readonly server: HttpServer;
  /** host:port it listens on. */
  readonly address: string;
  close(): Promise<void>;
}

export async function serveMcpHttp(deps: Omit<GatewayDeps, "tokenFor">, host: string, port: number): Promise<McpHttp> {
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
    await transport.handleRequest(req, res);
  };
  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      deps.log.error("mcp http request failed", { error_name: (error as Error).name });
      if (!res.headersSent) jsonRpcError(res, 500, "internal error");
    });
  });
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
