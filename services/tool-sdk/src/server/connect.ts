// The contract's unary methods over HTTP/1.1 (the Connect protocol, JSON or binary) on the
// service's HTTP port, through the same interceptor chain as gRPC: Connect's handler context
// (headers, signal, timeout) goes to the method's chain through http-call.ts, the chain's
// ToolError comes back a ConnectError. Loaded only when serveTool's `connect` is on, so tools
// that do not serve Connect do not load it.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMethod, DescMethodUnary } from "@bufbuild/protobuf";
import { type Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { ToolError, wireParts } from "../errors.js";
import type { UnaryInvoker, UnaryRoute } from "./http-call.js";

/** A ToolError for a Connect handler: Connect's codes are gRPC's numbers, its details the same google.rpc messages. */
function toConnectError(error: ToolError, domain: string): ConnectError {
  const { message, details } = wireParts(error, domain);
  return new ConnectError(message, error.code as number as Code, undefined, details);
}

/** The largest Connect request body read at all (as grpc's max receive length); each method's own limit applies after. */
const CONNECT_READ_MAX_BYTES = 4 * 1024 * 1024;

/**
 * Serves each route's method at POST /<package.Service>/<Method> (Connect protocol only: gRPC
 * has its own port); requests for other paths go to `fallback`.
 */
export function connectRoutes(
  routes: ReadonlyMap<DescMethod, UnaryRoute>,
  invoke: UnaryInvoker,
  fallback: (req: IncomingMessage, res: ServerResponse) => void,
): (req: IncomingMessage, res: ServerResponse) => void {
  const handle = connectNodeAdapter({
    grpc: false,
    grpcWeb: false,
    readMaxBytes: CONNECT_READ_MAX_BYTES,
    // As the HTTP API always did: zeros and empty lists are written, not left out.
    jsonOptions: { alwaysEmitImplicit: true },
    // Served by an HTTP/1.1 server, so every request is an IncomingMessage.
    fallback: (req, res) => fallback(req as IncomingMessage, res as ServerResponse),
    routes(router) {
      for (const [method, { domain }] of routes) {
        router.rpc(method as DescMethodUnary, async (request, context) => {
          try {
            return (await invoke(method, request, {
              headers: context.requestHeader,
              signal: context.signal,
              timeoutMs: context.timeoutMs(),
            })) as never;
          } catch (error) {
            throw error instanceof ToolError ? toConnectError(error, domain) : error;
          }
        });
      }
    },
  });
  return (req, res) => handle(req, res);
}
