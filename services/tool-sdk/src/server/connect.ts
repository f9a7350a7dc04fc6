// The contract's unary methods over HTTP/1.1 (the Connect protocol, JSON or binary) on the
// service's HTTP port, through the same interceptor chain as gRPC: Connect's handler context
// (headers, signal, timeout) goes to the method's chain through http-call.ts, the chain's
// ToolError comes back a ConnectError. Loaded only when serveTool's `connect` is on, so tools
// that do not serve Connect do not load it.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMessage, DescMethod, DescMethodUnary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";
import type { Compression } from "@connectrpc/connect/protocol";
import { status, ToolError, wireParts } from "../errors.js";
import type { UnaryInvoker, UnaryRoute } from "./http-call.js";
import { checkJsonBody } from "./json-body.js";

/** A ToolError for a Connect handler: Connect's codes are gRPC's numbers, its details the same google.rpc messages. */
function toConnectError(error: ToolError, domain: string): ConnectError {
  const { message, details } = wireParts(error, domain);
  // HTTP's own words for what the details say, for clients and proxies that read only headers.
  const headers = new Headers();
  if (error.code === status.UNAUTHENTICATED) headers.set("www-authenticate", "Bearer");
  if (error.retryable && error.retryAfterMs !== undefined)
    headers.set("retry-after", String(Math.max(1, Math.ceil(error.retryAfterMs / 1000))));
  return new ConnectError(message, error.code as number as Code, headers, details);
}

/**
 * How Connect reads one method's JSON requests: unknown fields refused, and every body checked
 * first — Connect reads JSON text through this decoder and offers no other hook before its own
 * parse, whose errors name neither the field nor a reason and may quote the body.
 */
function jsonOptionsFor(input: DescMessage, domain: string) {
  const utf8 = new TextDecoder();
  return {
    ignoreUnknownFields: false,
    // As the HTTP API always did: zeros and empty lists are written, not left out.
    alwaysEmitImplicit: true,
    textDecoder: {
      decode(bytes?: Uint8Array): string {
        const text = utf8.decode(bytes);
        try {
          checkJsonBody(input, text);
        } catch (error) {
          throw error instanceof ToolError ? toConnectError(error, domain) : error;
        }
        return text;
      },
    },
  };
}

/**
 * A compression whose failure to decompress a request body is the caller's (INVALID_ARGUMENT), as
 * a body that is not JSON is: connect-node answers a cut-short gzip stream `internal`.
 */
function callersFault(compression: Compression): Compression {
  return {
    name: compression.name,
    compress: (bytes) => compression.compress(bytes),
    decompress: (bytes, readMaxBytes) =>
      compression.decompress(bytes, readMaxBytes).catch((error: unknown) => {
        if (error instanceof ConnectError && error.code === Code.ResourceExhausted) throw error;
        throw new ConnectError(`the request body does not decompress as ${compression.name}`, Code.InvalidArgument);
      }),
  };
}

/** The largest Connect request body read at all (as grpc's max receive length); each method's own limit applies after. */
const CONNECT_READ_MAX_BYTES = 4 * 1024 * 1024;

/** The Connect protocol only (gRPC has its own port); repeated per method, whose options replace the router's choice. */
const CONNECT_ONLY = { grpc: false, grpcWeb: false } as const;

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
    ...CONNECT_ONLY,
    readMaxBytes: CONNECT_READ_MAX_BYTES,
    acceptCompression: [compressionGzip, compressionBrotli].map(callersFault),
    // Served by an HTTP/1.1 server, so every request is an IncomingMessage.
    fallback: (req, res) => fallback(req as IncomingMessage, res as ServerResponse),
    routes(router) {
      for (const [method, { domain }] of routes) {
        const jsonOptions = jsonOptionsFor(method.input, domain);
        router.rpc(
          method as DescMethodUnary,
          async (request, context) => {
            try {
              return (await invoke(method, request, {
                headers: context.requestHeader,
                signal: context.signal,
                timeoutMs: context.timeoutMs(),
              })) as never;
            } catch (error) {
              throw error instanceof ToolError ? toConnectError(error, domain) : error;
            }
          },
          { ...CONNECT_ONLY, jsonOptions },
        );
      }
    },
  });
  return (req, res) => handle(req, res);
}
