// The server pipeline as a chain of interceptors in the Connect-ES shape, `(next) => (call) =>
// response`: each stage is one function, composed once per method, testable alone. A stage
// refuses a call by throwing a ToolError; the errors stage turns anything else into INTERNAL. A
// stage that only checks and passes the call on is a plain function, not async: every async layer
// costs each call a promise and turns of the microtask queue (docs/performance.md).
import type { DescMethod } from "@bufbuild/protobuf";
import type { Metadata } from "@grpc/grpc-js";
import type { Caller } from "../auth.js";
import type { Logger } from "../logger.js";

/** One call as the interceptors see it; stages fill in what they learn (trace id, caller). */
export interface ServerCall {
  readonly method: DescMethod;
  /**
   * The decoded request; an OversizedRequest when it was larger than its method accepts, an
   * UndecodableRequest when its bytes are no message of the method's input type.
   */
  request: unknown;
  /** The request's gRPC metadata (authorization, traceparent). */
  readonly metadata: Metadata;
  /** The caller's deadline, if it sent one. */
  readonly deadline: Date | undefined;
  /** How long that deadline gave the call when it arrived (the gRPC or Connect timeout it came with). */
  readonly timeoutMs?: number | undefined;
  /** Aborted on cancel, deadline or drain; its reason is the ToolError the call ends with. */
  readonly abort: AbortController;
  /** Set by the auth stage. */
  caller: Caller | undefined;
  /** Set by the trace stage. */
  traceId: string;
  /** Bound to this call's trace id and method by the trace stage. */
  log: Logger;
  /**
   * Set by the unary terminal when the call is answered before its handler settled (a cancel, a
   * deadline, a drain): the handler's own end, which the call's concurrency slot waits for, since
   * a handler that does not stop on its signal is still work in progress.
   */
  abandoned?: Promise<void>;
  /** Server streams: writes one response message, waiting while the reader is slow. */
  send: (message: unknown) => Promise<void>;
}

/** Runs the rest of the chain: resolves with the response (unary) or once the stream is written. */
export type CallFn = (call: ServerCall) => Promise<unknown>;
export type Interceptor = (next: CallFn) => CallFn;

/**
 * The first interceptor is the outermost: it sees the call first and the outcome last. The calling
 * side composes its own call type (client/chain.ts) the same way.
 */
export function compose<C = ServerCall>(
  interceptors: readonly ((next: (call: C) => Promise<unknown>) => (call: C) => Promise<unknown>)[],
  terminal: (call: C) => Promise<unknown>,
): (call: C) => Promise<unknown> {
  return interceptors.reduceRight((next, interceptor) => interceptor(next), terminal);
}

/** What the deserializer hands on instead of a request too large for its method: its size, undecoded. */
export class OversizedRequest {
  constructor(readonly bytes: number) {}
}

/** What the deserializer hands on instead of bytes that do not decode as the method's input (truncated, or not protobuf). */
export class UndecodableRequest {
  constructor(readonly bytes: number) {}
}
