// The grpc-js side of a method's chain: the request decoded (or left undecoded when too large), the
// ServerCall built from the grpc-js call, and the chain's outcome sent back as a status.
import { once } from "node:events";
import { type DescMethod, fromBinary } from "@bufbuild/protobuf";
import {
  type handleServerStreamingCall,
  type handleUnaryCall,
  type Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
} from "@grpc/grpc-js";
import type { methodDefinition } from "../bridge.js";
import { maxRequestBytesOf } from "../contract.js";
import { type ToolError, toServiceError } from "../errors.js";
import type { Logger } from "../logger.js";
import { timeoutOf } from "./arrival.js";
import { cancelledAt } from "./deadline.js";
import { noStream } from "./handler.js";
import { type CallFn, OversizedRequest, type ServerCall, UndecodableRequest } from "./interceptor.js";

async function writeTo(
  stream: ServerWritableStream<unknown, unknown>,
  message: unknown,
  signal: AbortSignal,
): Promise<void> {
  // A slow reader holds the stream back rather than have its messages pile up here.
  if (!stream.write(message)) await once(stream, "drain", { signal }).catch(() => undefined);
}

export function bindAsync(server: Server, address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, port) =>
      error ? reject(error) : resolve(port),
    );
  });
}

/** Adapts a chain to grpc-js: builds the ServerCall, ends the call with the chain's outcome. */
export function grpcHandler(
  method: DescMethod,
  chain: CallFn,
  domain: string,
  log: Logger,
): handleUnaryCall<unknown, unknown> | handleServerStreamingCall<unknown, unknown> {
  return (
    grpcCall: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>,
    callback?: sendUnaryData<unknown>,
  ) => {
    const abort = new AbortController();
    const rawDeadline = grpcCall.getDeadline();
    const deadlineMs = rawDeadline instanceof Date ? rawDeadline.getTime() : rawDeadline;
    const deadline = Number.isFinite(deadlineMs) ? new Date(deadlineMs) : undefined;
    // grpc-js ends a call whose deadline passed itself and reports it here, usually before the deadline stage's timer.
    const onCancelled = () => abort.abort(cancelledAt(call));
    grpcCall.once("cancelled", onCancelled);
    const stream = callback ? undefined : (grpcCall as ServerWritableStream<unknown, unknown>);
    const call: ServerCall = {
      method,
      request: grpcCall.request,
      metadata: grpcCall.metadata,
      deadline,
      timeoutMs: timeoutOf(grpcCall.metadata) ?? (deadline && Math.max(0, deadline.getTime() - Date.now())),
      abort,
      caller: undefined,
      traceId: "",
      log,
      send: stream ? (message) => writeTo(stream, message, abort.signal) : noStream,
    };
    chain(call).then(
      (response) => {
        grpcCall.removeListener("cancelled", onCancelled);
        if (callback) callback(null, response);
        else stream!.end();
      },
      (error: ToolError) => {
        grpcCall.removeListener("cancelled", onCancelled);
        if (callback) callback(toServiceError(error, domain), null);
        else stream!.emit("error", toServiceError(error, domain));
      },
    );
  };
}

/**
 * Refuses to decode a request above its method's limit, and hands on bytes that do not decode as a
 * marker instead of throwing (grpc-js would answer INTERNAL, outside the chain): the chain answers both.
 */
export function withSizeLimit(
  method: DescMethod,
  definition: ReturnType<typeof methodDefinition>,
): ReturnType<typeof methodDefinition> {
  const limit = maxRequestBytesOf(method);
  return {
    ...definition,
    requestDeserialize: (bytes: Buffer) => {
      if (bytes.length > limit) return new OversizedRequest(bytes.length) as never;
      try {
        return fromBinary(method.input, bytes);
      } catch {
        return new UndecodableRequest(bytes.length) as never;
      }
    },
  };
}
