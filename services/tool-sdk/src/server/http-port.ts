// The HTTP port beside gRPC: /metrics, /healthz, the service's own routes and, when asked, Connect.
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { DescMethod } from "@bufbuild/protobuf";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import { type UnaryRoute, unaryInvoker } from "./http-call.js";
import type { ServeOptions } from "./options.js";
import type { CallSlots } from "./slots.js";

/**
 * How long a request may take to arrive, its headers and its body: one that never ends (a slow or
 * stalled client) is answered 408 then and its connection closed. Node's own default holds it for
 * five minutes, so a few such clients would keep sockets and a shutdown waiting.
 */
export const HTTP_REQUEST_TIMEOUT_MS = 30_000;

/** The options of every HTTP server of the suite: its requests' timeouts, checked every second. */
export function httpServerOptions(requestTimeoutMs = HTTP_REQUEST_TIMEOUT_MS) {
  return {
    requestTimeout: requestTimeoutMs,
    headersTimeout: Math.min(10_000, requestTimeoutMs),
    connectionsCheckingInterval: 1000,
  };
}

function listenHttp(server: HttpServer, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
  });
}

export interface HttpPortParts {
  readonly options: ServeOptions;
  readonly metrics: ServerMetrics;
  readonly slots: CallSlots;
  /** The contract's unary methods' chains, for Connect callers on the HTTP port. */
  readonly unaryRoutes: ReadonlyMap<DescMethod, UnaryRoute>;
  readonly log: Logger;
}

export async function serveHttpPort(
  parts: HttpPortParts,
): Promise<{ readonly http: HttpServer; readonly port: number }> {
  const { options, metrics, slots, unaryRoutes } = parts;
  const invoke = unaryInvoker(unaryRoutes, parts.log);
  const routeHttp = (req: IncomingMessage, res: ServerResponse): void => {
    if (options.http?.(req, res)) return;
    if (req.url === "/metrics") {
      metrics.registry.metrics().then(
        (body) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(body),
        () => res.writeHead(500).end(),
      );
    } else if (req.url === "/healthz") {
      res
        .writeHead(slots.draining ? 503 : 200, { "content-type": "text/plain" })
        .end(slots.draining ? "draining\n" : "ok\n");
    } else {
      res.writeHead(404).end();
    }
  };
  const http = createServer(
    httpServerOptions(options.httpRequestTimeoutMs),
    options.connect ? (await import("./connect.js")).connectRoutes(unaryRoutes, invoke, routeHttp) : routeHttp,
  );
  return { http, port: await listenHttp(http, options.host, options.metricsPort) };
}
