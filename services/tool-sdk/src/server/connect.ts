// The contract's unary methods over HTTP/1.1 (the Connect protocol, JSON or binary) on the
// service's HTTP port, through the same interceptor chain as gRPC: Connect's handler context
// (headers, signal, timeout) goes to the method's chain through http-call.ts, the chain's
// ToolError comes back a ConnectError. Loaded only when serveTool's `connect` is on, so tools
// that do not serve Connect do not load it.
import type { IncomingMessage, ServerResponse } from "node:http";
import { type DescMessage, type DescMethod, type DescMethodUnary, fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";
import type {
  Compression,
  UniversalHandler,
  UniversalServerRequest,
  UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import { codeToHttpStatus, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { status, ToolError, wireParts } from "../errors.js";
import { echoedName } from "../pii.js";
import type { UnaryInvoker, UnaryRoute } from "./http-call.js";
import { checkJsonBody } from "./json-body.js";
import { oversized, undecodable } from "./stages.js";
import { MAX_TIMER_MS } from "../timers.js";

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
        if (error instanceof ConnectError && error.code === Code.ResourceExhausted)
          throw new ConnectError(
            `the request body decompresses to more than ${readMaxBytes} bytes, more than the method takes`,
            Code.InvalidArgument,
          );
        throw new ConnectError(`the request body does not decompress as ${compression.name}`, Code.InvalidArgument);
      }),
  };
}

/** The largest Connect request body read at all (as grpc's max receive length); each method's own limit applies after. */
const CONNECT_READ_MAX_BYTES = 4 * 1024 * 1024;

/**
 * The most of a method's request body read, decompressed: JSON takes more bytes than protobuf's
 * binary form (names, quotes, base64), so four times the method's binary limit, which applies to
 * the decoded message after. Past it the body is refused REQUEST_TOO_LARGE (checkedFirst), or
 * invalid_argument once decompressed (callersFault), without decoding.
 */
function readLimitOf(maxRequestBytes: number): number {
  return Math.min(CONNECT_READ_MAX_BYTES, 4 * maxRequestBytes);
}

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
    // Connect's header allows ten digits (115 days); past setTimeout's 2^31 - 1 ms a timer fires at
    // once, and every such call would be cut off as it starts. Longer is refused invalid_argument.
    maxTimeoutMs: MAX_TIMER_MS,
    acceptCompression: [compressionGzip, compressionBrotli].map(callersFault),
    // Served by an HTTP/1.1 server, so every request is an IncomingMessage.
    fallback: (req, res) => notServed(routes, req as IncomingMessage, res as ServerResponse, fallback),
    routes(router) {
      for (const [method, { domain, admit, refusedEarly, maxRequestBytes }] of routes) {
        const readMaxBytes = readLimitOf(maxRequestBytes);
        const jsonOptions = jsonOptionsFor(method.input, domain);
        const at = router.handlers.length;
        router.rpc(
          method as DescMethodUnary,
          async (request, context) => {
            try {
              return (await invoke(method, request, {
                headers: context.requestHeader,
                signal: context.signal,
                timeoutMs: context.timeoutMs(),
                expired: () => ConnectError.from(context.signal.reason).code === Code.DeadlineExceeded,
              })) as never;
            } catch (error) {
              throw error instanceof ToolError ? toConnectError(error, domain) : error;
            }
          },
          { ...CONNECT_ONLY, jsonOptions, readMaxBytes },
        );
        router.handlers[at] = checkedFirst(router.handlers[at]!, method, {
          domain,
          admit,
          refusedEarly,
          readMaxBytes,
          maxRequestBytes,
        });
      }
    },
  });
  return (req, res) => handle(req, res);
}

/**
 * A path of a served contract that Connect has no route for (a method it lacks, a streaming one) is
 * answered as Connect answers errors, naming why; Connect's router alone would send an empty 404.
 */
function notServed(
  routes: ReadonlyMap<DescMethod, UnaryRoute>,
  req: IncomingMessage,
  res: ServerResponse,
  fallback: (req: IncomingMessage, res: ServerResponse) => void,
): void {
  const [, typeName = "", name = ""] = /^\/([^/?]+)\/([^/?]*)/.exec(req.url ?? "") ?? [];
  const service = [...routes.keys()].find((m) => m.parent.typeName === typeName)?.parent;
  if (!service) {
    fallback(req, res);
    return;
  }
  const method = service.methods.find((m) => m.name === name);
  const message = method
    ? `${typeName}/${name} is not served over Connect${method.methodKind === "unary" ? "" : ": it streams; call it over gRPC"}`
    : `${typeName} has no method ${echoedName(decodeURIComponentSafe(name))}`;
  res
    .writeHead(404, { "content-type": "application/json" })
    .end(JSON.stringify({ code: method ? "unimplemented" : "not_found", message }));
}

function decodeURIComponentSafe(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

const BINARY = /^application\/proto(?:;|$)/i;
/** Base64 in either alphabet (Connect's GET uses base64url), padded or not. */
const BASE64 = /^[A-Za-z0-9+/_-]*={0,2}$/;

/**
 * A method's handler that first checks the caller's bearer token (before a byte of the body is
 * read, decompressed or decoded: a caller without one costs a header's look), then decodes a
 * binary request (uncompressed: a compressed one is Connect's to decompress), a POST's body or a
 * GET's `message` (a method without side effects may be asked by GET), and answers bytes that are
 * no message of its input `invalid_argument`, as gRPC does: Connect's own parse answers them
 * `internal` ("parse binary: …"), with no hook before it.
 */
function checkedFirst(
  handler: UniversalHandler,
  method: DescMethod,
  limits: Pick<UnaryRoute, "domain" | "admit" | "refusedEarly" | "maxRequestBytes"> & { readMaxBytes: number },
): UniversalHandler {
  const { domain, admit, refusedEarly, readMaxBytes, maxRequestBytes } = limits;
  const input = method.input;
  // Refused before the chain, and counted as the chain counts what it refuses.
  const answer = (refused: ToolError): UniversalServerResponse => {
    refusedEarly(refused.code);
    const error = toConnectError(refused, domain);
    const header = new Headers(error.metadata);
    header.set("content-type", "application/json");
    return { status: codeToHttpStatus(error.code), header, body: replay([errorToJsonBytes(error, {})]) };
  };
  const tooLarge = () =>
    answer(
      new ToolError(
        status.INVALID_ARGUMENT,
        "REQUEST_TOO_LARGE",
        `the body of ${method.name} is over ${readMaxBytes} bytes; ${method.name} accepts a ${input.name} of at most ${maxRequestBytes} bytes in protobuf's binary form`,
        { metadata: { max_bytes: String(maxRequestBytes) } },
      ),
    );
  // A binary body is held to the contract's size as received, as over gRPC: its message re-encoded
  // can be far smaller (a field repeated, the last one kept), and JSON's allowance is not for it.
  const refuse = (bytes: Uint8Array): UniversalServerResponse | undefined => {
    if (bytes.byteLength > maxRequestBytes) return answer(oversized(method, bytes.byteLength, maxRequestBytes));
    try {
      fromBinary(input, bytes);
      return undefined;
    } catch {
      return answer(undecodable(input, bytes.byteLength));
    }
  };
  const checked = async (request: UniversalServerRequest): Promise<UniversalServerResponse> => {
    const refused = await admit(request.header.get("authorization"));
    if (refused) return answer(refused);
    if (request.method === "GET") {
      const query = new URL(request.url, "http://connect.invalid").searchParams;
      // Connect's adapter leaves a base64 decoder's throw unanswered (the request hangs) or answers
      // it internal: a message that is not base64 is the caller's mistake, answered here.
      const notBase64 = () =>
        answer(
          new ToolError(
            status.INVALID_ARGUMENT,
            "REQUEST_INVALID",
            "the message parameter is not base64url (base64=1)",
          ),
        );
      if (query.get("base64") === "1" && !BASE64.test(query.get("message") ?? "")) return notBase64();
      let bytes: Uint8Array | undefined;
      try {
        bytes = getMessage(query, readMaxBytes);
      } catch {
        return notBase64();
      }
      return (bytes && refuse(bytes)) ?? handler(request);
    }
    const encoding = request.header.get("content-encoding") ?? "identity";
    const body = request.body;
    // A compressed body is Connect's to decompress, within readMaxBytes (callersFault).
    if (encoding !== "identity" || !isStream(body)) return handler(request);
    const chunks: Uint8Array[] = [];
    let size = 0;
    for await (const chunk of body) {
      size += chunk.byteLength;
      if (size > readMaxBytes) return tooLarge();
      chunks.push(chunk);
    }
    const bytes = Buffer.concat(chunks);
    const binary = BINARY.test(request.header.get("content-type") ?? "");
    return (binary && refuse(bytes)) || handler({ ...request, body: replay([bytes]) });
  };
  return Object.assign(checked, handler);
}

/**
 * The binary message of a Connect GET, read as Connect reads it (base64url with `base64=1`, else the
 * text's bytes); undefined for JSON, a compressed message (Connect's to decompress) or one past the
 * read limit (Connect's to refuse).
 */
function getMessage(query: URLSearchParams, readMaxBytes: number): Uint8Array | undefined {
  const compression = query.get("compression") ?? "identity";
  if (query.get("encoding") !== "proto" || compression !== "identity") return undefined;
  const message = query.get("message") ?? "";
  const bytes = query.get("base64") === "1" ? base64Decode(message) : new TextEncoder().encode(message);
  return bytes.byteLength > readMaxBytes ? undefined : bytes;
}

function isStream(body: UniversalServerRequest["body"]): body is AsyncIterable<Uint8Array> {
  return typeof body === "object" && body !== null && Symbol.asyncIterator in body;
}

async function* replay(chunks: readonly Uint8Array[]): AsyncIterable<Uint8Array> {
  yield* chunks;
}
