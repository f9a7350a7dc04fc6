// The contract's unary methods over HTTP/1.1 (the Connect protocol, JSON or binary) on the
// service's HTTP port, through the same interceptor chain as gRPC: Connect's handler context
// (headers, signal, timeout) becomes a ServerCall, the chain's ToolError a ConnectError.
import type { IncomingMessage, ServerResponse } from "node:http";
import { type DescMethod, type DescMethodUnary, toBinary } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Metadata } from "@grpc/grpc-js";
import { status, ToolError, toConnectError } from "../errors.js";
import type { Logger } from "../logger.js";
import { noStream } from "./handler.js";
import { type CallFn, OversizedRequest, type ServerCall } from "./interceptor.js";

/** What an HTTP request brings to a call besides its message. */
export interface HttpCallInit {
  /** Read like gRPC metadata: authorization, traceparent. */
  readonly headers: Headers;
  /** Aborted when the caller goes away. */
  readonly signal: AbortSignal;
  readonly timeoutMs?: number | undefined;
}

/**
 * Runs one unary method of the served contract through its full chain (metrics, trace, errors,
 * shed, auth, validation, deadline…); rejects with the chain's ToolError. Connect's routes and
 * any other HTTP route on the port that stands for a method call this, never a handler directly.
 */
export type UnaryInvoker = (method: DescMethod, request: unknown, init: HttpCallInit) => Promise<unknown>;

export interface UnaryRoute {
  readonly chain: CallFn;
  readonly maxRequestBytes: number;
  /** google.rpc.ErrorInfo.domain of the method's service. */
  readonly domain: string;
}

// grpc-js metadata keys are lower-case tokens; binary (-bin) values would need decoding and none is read.
const METADATA_KEY = /^[0-9a-z_.-]+$/;

function metadataOf(headers: Headers): Metadata {
  const metadata = new Metadata();
  headers.forEach((value, key) => {
    if (METADATA_KEY.test(key) && !key.endsWith("-bin")) metadata.add(key, value);
  });
  return metadata;
}

export function unaryInvoker(routes: ReadonlyMap<DescMethod, UnaryRoute>, log: Logger): UnaryInvoker {
  return (method, request, { headers, signal, timeoutMs }) => {
    const route = routes.get(method);
    if (!route) return Promise.reject(new Error(`${method.parent.typeName}/${method.name} is not served over HTTP`));
    const abort = new AbortController();
    const onAbort = () => abort.abort(new ToolError(status.CANCELLED, "CALL_CANCELLED", "the caller cancelled the call"));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    // The method's size limit is the contract's, in its binary form, as over gRPC.
    const bytes = toBinary(method.input, request as never).length;
    const call: ServerCall = {
      method,
      request: bytes > route.maxRequestBytes ? new OversizedRequest(bytes) : request,
      metadata: metadataOf(headers),
      deadline: timeoutMs === undefined ? undefined : new Date(Date.now() + timeoutMs),
      abort,
      caller: undefined,
      traceId: "",
      log,
      send: noStream,
    };
    return route.chain(call).finally(() => signal.removeEventListener("abort", onAbort));
  };
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
            return (await invoke(method, request, { headers: context.requestHeader, signal: context.signal, timeoutMs: context.timeoutMs() })) as never;
          } catch (error) {
            throw error instanceof ToolError ? toConnectError(error, domain) : error;
          }
        });
      }
    },
  });
  return (req, res) => handle(req, res);
}
