// The end of the chain: a service's handler, called with its CallContext and ended by the
// call's signal (cancel, deadline, drain) rather than left to run past it unseen.
import type { DescMethod, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { Caller } from "../auth.js";
import type { Logger } from "../logger.js";
import type { CallFn, ServerCall } from "./interceptor.js";

/** What a handler knows about the call it serves. */
export interface CallContext {
  /** Aborted when the caller cancels or the deadline passes. */
  readonly signal: AbortSignal;
  /** The caller's deadline, if it sent one. */
  readonly deadline: Date | undefined;
  readonly caller: Caller;
  readonly traceId: string;
  /** Logger bound to this call's trace id and method. */
  readonly log: Logger;
}

export type UnaryHandler<M extends DescMethod> = (
  request: MessageShape<M["input"]>,
  ctx: CallContext,
) => Promise<MessageInitShape<M["output"]>>;
export type StreamHandler<M extends DescMethod> = (
  request: MessageShape<M["input"]>,
  ctx: CallContext,
) => AsyncIterable<MessageInitShape<M["output"]>>;

/** The `send` of a unary call: it has no stream. */
export const noStream = (): Promise<void> => Promise.reject(new Error("a unary call has no stream to send on"));

function callContext(call: ServerCall): CallContext {
  return {
    signal: call.abort.signal,
    deadline: call.deadline,
    caller: call.caller!,
    traceId: call.traceId,
    log: call.log,
  };
}

const ignore = (): void => undefined;

/**
 * Calls a unary handler; the call ends with the signal's reason if it aborts first, and then
 * `call.abandoned` follows the handler to its end.
 */
export function unaryTerminal(handler: UnaryHandler<DescMethod>): CallFn {
  return (call) => {
    const { signal } = call.abort;
    if (signal.aborted) return Promise.reject(signal.reason);
    const work = handler(call.request as never, callContext(call));
    const aborted = new Promise<never>((_, reject) =>
      signal.addEventListener(
        "abort",
        () => {
          call.abandoned = work.then(ignore, ignore);
          reject(signal.reason);
        },
        { once: true },
      ),
    );
    return Promise.race([work, aborted]);
  };
}

/** Writes each message a stream handler yields; a handler that ends on its signal ends with that status, not OK. */
export function streamTerminal(handler: StreamHandler<DescMethod>): CallFn {
  return async (call) => {
    const { signal } = call.abort;
    if (signal.aborted) throw signal.reason;
    for await (const item of handler(call.request as never, callContext(call))) {
      if (signal.aborted) throw signal.reason;
      await call.send(item);
    }
    if (signal.aborted) throw signal.reason;
    return undefined;
  };
}
