// The end of every chain: one grpc-js unary call of the request's bytes, with the call's deadline,
// token, trace context and routing headers. A failure becomes a CallError decoded from the status.
import { type Client, Metadata, type ServiceError } from "@grpc/grpc-js";
import { decodeStatusDetails, status } from "../../errors.js";
import { injectContext } from "../../tracing.js";
import { AVOID_HEADER, PICK_HEADER, PREFER_NOT_HEADER } from "../avoiding-round-robin.js";
import { CallError, clientFailure } from "../call-error.js";
import type { ClientCall, ClientCallFn } from "../chain.js";

const passThrough = (bytes: Buffer): Buffer => bytes;

/** What an attempt sends besides its message: the caller's metadata, the bearer token, traceparent, routing. */
export function metadataFor(call: Pick<ClientCall, "metadata" | "token" | "spanContext"> & Partial<ClientCall>) {
  const metadata = call.metadata?.clone() ?? new Metadata();
  if (call.token) metadata.set("authorization", `Bearer ${call.token}`);
  if (call.spanContext) injectContext(call.spanContext, metadata);
  // Read by the channel's balancer at pick time and never sent (avoiding-round-robin.ts).
  if (call.attempt && call.attempt.avoid.length > 0) metadata.set(AVOID_HEADER, call.attempt.avoid.join(","));
  if (call.attempt && call.attempt.preferNot.length > 0)
    metadata.set(PREFER_NOT_HEADER, call.attempt.preferNot.join(","));
  if (call.attempt?.watch) metadata.set(PICK_HEADER, call.attempt.watch);
  return metadata;
}

/** A failed status as the caller's CallError. */
export function statusError(error: ServiceError, call: Pick<ClientCall, "target">, attempts: number): CallError {
  const failure = decodeStatusDetails(error);
  return new CallError({
    ...failure,
    attempts,
    tool: call.target.tool,
    method: call.target.method.name,
    refusedByTool: failure.reason !== undefined && call.target.domainReasons.has(failure.reason),
  });
}

/** grpc-js's own receive limit: the largest answer a client takes unless told otherwise. */
export const DEFAULT_MAX_ANSWER_BYTES = 4 * 1024 * 1024;

/** How grpc-js fails a call whose answer's length prefix is over the channel's grpc.max_receive_message_length. */
const OVER_RECEIVE_LIMIT = /^Received message larger than max \((\d+) vs\.? (\d+)\)/;

/**
 * An answer over the caller's bound, which grpc-js refused undecoded: INTERNAL ANSWER_TOO_LARGE rather than its
 * RESOURCE_EXHAUSTED, which callers retry and wait out, while the same request gets the same answer. Only when the
 * limit named is this channel's: a server refusing a request over its own limit says the same words.
 */
export function answerTooLarge(
  error: ServiceError,
  call: Pick<ClientCall, "target">,
  attempts: number,
  maxAnswerBytes: number,
): CallError | undefined {
  const found = error.code === status.RESOURCE_EXHAUSTED ? OVER_RECEIVE_LIMIT.exec(error.details) : null;
  if (!found || Number(found[2]) !== maxAnswerBytes) return undefined;
  const { tool, method } = call.target;
  const bytes = found[1]!;
  return new CallError({
    code: status.INTERNAL,
    reason: "ANSWER_TOO_LARGE",
    message: `${tool} answered ${method.name} with ${bytes} bytes, more than the ${maxAnswerBytes} this caller accepts`,
    metadata: { bytes, max_bytes: String(maxAnswerBytes) },
    attempts,
    tool,
    method: method.name,
  });
}

/** Sends the call's attempt; counts it as sent, and cancels it when the caller's signal aborts. */
export function transport(client: Client, maxAnswerBytes = DEFAULT_MAX_ANSWER_BYTES): ClientCallFn {
  return (call) =>
    new Promise((resolve, reject) => {
      const { attempt, target } = call;
      const signal = call.options.signal;
      // An aborted signal fires no event, and a call cancelled right after it was made still
      // reaches the tool: a caller that already gave up sends nothing.
      if (signal?.aborted) {
        reject(
          clientFailure(
            call,
            status.CANCELLED,
            "CALL_CANCELLED",
            `the caller gave up before ${target.method.name} was sent`,
          ),
        );
        return;
      }
      attempt.number = ++call.sent.attempts;
      const grpcCall = client.makeUnaryRequest(
        target.path,
        passThrough,
        target.deserialize,
        call.bytes,
        metadataFor(call),
        call.deadline === undefined ? {} : { deadline: new Date(call.deadline) },
        (error: ServiceError | null, response?: unknown) => {
          signal?.removeEventListener("abort", cancel);
          attempt.pending = false;
          if (error)
            reject(
              answerTooLarge(error, call, attempt.number, maxAnswerBytes) ?? statusError(error, call, attempt.number),
            );
          else resolve(response);
        },
      );
      attempt.call = grpcCall;
      const cancel = () => grpcCall.cancel();
      signal?.addEventListener("abort", cancel, { once: true });
    });
}
