// The calling side as a chain of interceptors in the server's shape (server/interceptor.ts),
// `(next) => (call) => response`: toolClient composes one chain per method from its contract
// (plan.ts), the raw client is the transport alone. A stage refuses a call by throwing a CallError
// and records what it learnt on the call (its deadline, its attempts, where the answer came from).
import { type DescMethod, fromBinary, type Message, toBinary } from "@bufbuild/protobuf";
import type { ClientUnaryCall, Metadata } from "@grpc/grpc-js";
import type { Context } from "@opentelemetry/api";
import { methodPath } from "../contract.js";
import { compose } from "../server/interceptor.js";
import type { CallError } from "./call-error.js";
import { wireBytes } from "./response-cache.js";

export type ResultSource = "live" | "cache" | "degraded";

/** Who is called: what every CallError of the call names. */
export interface CallTarget {
  readonly tool: string;
  readonly method: DescMethod;
  readonly path: string;
  readonly deserialize: (bytes: Buffer) => unknown;
  /** The service's own error reasons (its contract's enum), each a refusal that did nothing. */
  readonly domainReasons: ReadonlySet<string>;
}

/** One attempt on the wire, as the hedging slot sees it. */
export interface Attempt {
  /** 1 for the call's first attempt; 0 until the transport sends it. */
  number: number;
  readonly hedge: boolean;
  call?: ClientUnaryCall;
  /** The replica the channel's balancer started it on, once it has (avoiding-round-robin.ts); never guessed. */
  address: string | undefined;
  /** The balancer's watch (PICK_HEADER) that tells `address`; none: nobody asked. */
  watch: string | undefined;
  pending: boolean;
  /** Cancelled because another attempt answered first. */
  lost: boolean;
  readonly sentAt: number;
  /** Addresses this attempt must not use (a hedge stays off the replicas it races). */
  readonly avoid: readonly string[];
  /** Addresses it uses only if nothing else is ready (replicas that failed or were slow). */
  readonly preferNot: readonly string[];
}

/** One call's attempts so far, shared by all of them. */
export interface Sent {
  attempts: number;
  hedges: number;
  /** Attempts the call may send, the first included (the retry stage sets it). */
  maxAttempts: number;
  readonly failedPeers: string[];
  /** Some failed attempt may have taken effect: the call's failure is then "outcome unknown". */
  mayHaveActed: boolean;
}

/** Where the answer came from, filled in as the chain learns it. */
export interface Outcome {
  source: ResultSource;
  hedged: boolean;
  /** Which attempt's answer this is (1 = the first); 0 without a live answer. */
  winner: number;
  /** Age of a cached answer when it was served, and when it was given live (epoch ms). */
  cacheAgeMs?: number;
  cachedAt?: number;
  /** The live failure a fallback answered for. */
  liveError?: CallError;
}

/** What the call's caller asks of it; see CallOptions in tool-client.ts. */
export interface CallRequestOptions {
  readonly signal?: AbortSignal | undefined;
  readonly fallback?: boolean | undefined;
  readonly degraded?: boolean | undefined;
  readonly maxExtraAttempts?: number | undefined;
  readonly onRetry?:
    | ((retry: {
        readonly attempt: number;
        readonly waitMs: number;
        readonly error: CallError;
      }) => void | Promise<void>)
    | undefined;
}

export interface ClientCall {
  readonly target: CallTarget;
  readonly request: Message;
  /** The request as sent: every attempt sends the same bytes (the same idempotency key). */
  readonly bytes: Buffer;
  readonly options: CallRequestOptions;
  /** Metadata the caller brings; each attempt sends a copy with its own headers added. */
  readonly metadata: Metadata | undefined;
  token: string | undefined;
  /** Epoch ms; propagated as the gRPC deadline of every attempt. */
  deadline: number | undefined;
  /**
   * The caller's deadline left the tool less time than it is held to (stages/deadline.ts): the
   * call's timeout is then the caller's doing, and the breaker does not count it against the tool.
   */
  cutShort: boolean;
  /** The client span's context, injected as traceparent. */
  spanContext: Context | undefined;
  readonly sent: Sent;
  readonly outcome: Outcome;
  /** This attempt (the hedging slot gives each attempt its own). */
  readonly attempt: Attempt;
}

/** Runs the rest of the chain: resolves with the response. */
export type ClientCallFn = (call: ClientCall) => Promise<unknown>;
export type ClientInterceptor = (next: ClientCallFn) => ClientCallFn;

export function composeClient(interceptors: readonly ClientInterceptor[], terminal: ClientCallFn): ClientCallFn {
  return compose<ClientCall>(interceptors, terminal);
}

export function callTarget(tool: string, method: DescMethod, domainReasons: ReadonlySet<string>): CallTarget {
  return {
    tool,
    method,
    path: methodPath(method),
    deserialize: (bytes) => {
      const response = fromBinary(method.output, bytes);
      wireBytes.set(response, bytes.length);
      return response;
    },
    domainReasons,
  };
}

export function newAttempt(hedge: boolean, avoid: readonly string[] = [], preferNot: readonly string[] = []): Attempt {
  return {
    number: 0,
    hedge,
    address: undefined,
    watch: undefined,
    pending: true,
    lost: false,
    sentAt: performance.now(),
    avoid,
    preferNot,
  };
}

export interface NewCall {
  readonly target: CallTarget;
  readonly request: Message;
  readonly options?: CallRequestOptions;
  readonly metadata?: Metadata | undefined;
  readonly token?: string | undefined;
  readonly deadline?: number | undefined;
}

export function newCall(init: NewCall): ClientCall {
  return {
    target: init.target,
    request: init.request,
    bytes: Buffer.from(toBinary(init.target.method.input, init.request)),
    options: init.options ?? {},
    metadata: init.metadata,
    token: init.token,
    deadline: init.deadline,
    cutShort: false,
    spanContext: undefined,
    sent: { attempts: 0, hedges: 0, maxAttempts: 1, failedPeers: [], mayHaveActed: false },
    outcome: { source: "live", hedged: false, winner: 0 },
    attempt: newAttempt(false),
  };
}
