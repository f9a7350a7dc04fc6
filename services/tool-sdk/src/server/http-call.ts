// One unary method's chain called from an HTTP request (Connect's routes): the request's headers,
// signal and timeout become a ServerCall, so the call meets the same stages as over gRPC.
import { type DescMethod, toBinary } from "@bufbuild/protobuf";
import { Metadata } from "@grpc/grpc-js";
import type { status, ToolError } from "../errors.js";
import type { Logger } from "../logger.js";
import { cancelledAt, deadlinePassed } from "./deadline.js";
import { noStream } from "./handler.js";
import { type CallFn, OversizedRequest, type ServerCall } from "./interceptor.js";

/** What an HTTP request brings to a call besides its message. */
export interface HttpCallInit {
  /** Read like gRPC metadata: authorization, traceparent. */
  readonly headers: Headers;
  /** Aborted when the caller goes away, or when its timeout passes (then `expired` says so). */
  readonly signal: AbortSignal;
  readonly timeoutMs?: number | undefined;
  /** Whether the signal was aborted by the caller's timeout. */
  readonly expired?: () => boolean;
}

/**
 * Runs one unary method of the served contract through its full chain (metrics, trace, errors,
 * shed, auth, validation, deadline…); rejects with the chain's ToolError. Connect's routes call
 * this, never a handler directly.
 */
export type UnaryInvoker = (method: DescMethod, request: unknown, init: HttpCallInit) => Promise<unknown>;

export interface UnaryRoute {
  readonly chain: CallFn;
  readonly maxRequestBytes: number;
  /** google.rpc.ErrorInfo.domain of the method's service. */
  readonly domain: string;
  /** The refusal of a request whose authorization header holds no bearer token that verifies (auth-stages.ts, bearerCheck). */
  readonly admit: (authorization: string | null) => Promise<ToolError | undefined>;
  /** Counts a request refused before the chain ran, by its code (stages.ts, countRefusedEarly). */
  readonly refusedEarly: (code: status) => void;
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
  return (method, request, { headers, signal, timeoutMs, expired }) => {
    const route = routes.get(method);
    if (!route) return Promise.reject(new Error(`${method.parent.typeName}/${method.name} is not served over HTTP`));
    const abort = new AbortController();
    const deadline = timeoutMs === undefined ? undefined : new Date(Date.now() + timeoutMs);
    const onAbort = () => abort.abort(expired?.() ? deadlinePassed() : cancelledAt({ deadline, timeoutMs }));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    // The method's size limit is the contract's, in its binary form, as over gRPC.
    const bytes = toBinary(method.input, request as never).length;
    const call: ServerCall = {
      method,
      request: bytes > route.maxRequestBytes ? new OversizedRequest(bytes) : request,
      metadata: metadataOf(headers),
      deadline,
      timeoutMs,
      abort,
      caller: undefined,
      traceId: "",
      log,
      send: noStream,
    };
    return route.chain(call).finally(() => signal.removeEventListener("abort", onAbort));
  };
}
