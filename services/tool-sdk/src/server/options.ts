// What serveTool takes and gives: the contract's handlers, the server's options, the running server.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMethod, DescService, MessageShape } from "@bufbuild/protobuf";
import type { FaultProfile } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import type { Caller } from "../auth.js";
import type { CallKey } from "../call-keys.js";
import type { FaultSwitch } from "../faults.js";
import type { BoundKeySet } from "../key-bindings.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import type { MethodsOf } from "../method-types.js";
import type { OidcSettings } from "../oidc.js";
import type { RuleViolation } from "../validation.js";
import type { StreamHandler, UnaryHandler } from "./handler.js";
import type { Interceptor } from "./interceptor.js";

/** An extra route on the HTTP port: answers and returns true, or returns false for a path it does not serve. */
export type HttpRoute = (req: IncomingMessage, res: ServerResponse) => boolean;

/** One handler per method of the contract, keyed by the method's local name (e.g. "getOrder"). */
export type ToolHandlers<S extends DescService> = {
  [K in keyof MethodsOf<S>]: MethodsOf<S>[K] extends DescMethod & { methodKind: "server_streaming" }
    ? StreamHandler<MethodsOf<S>[K]>
    : MethodsOf<S>[K] extends DescMethod
      ? MethodsOf<S>[K] extends { methodKind: "unary" }
        ? UnaryHandler<MethodsOf<S>[K]>
        : never
      : never;
};

/** Rewrites a request into its canonical form before validation (e.g. upper-case check characters). */
export type Normaliser<S extends DescService> = {
  [K in keyof MethodsOf<S>]?: MethodsOf<S>[K] extends DescMethod
    ? (request: MessageShape<MethodsOf<S>[K]["input"]>) => void
    : never;
};

/**
 * The rules of a request its contract cannot express (a real birth date, a bound only some callers
 * may leave out), checked beside the contract's: their violations and protovalidate's are refused
 * together, in one INVALID_ARGUMENT. Runs on the normalised request, after auth; no I/O.
 */
export type Validator<S extends DescService> = {
  [K in keyof MethodsOf<S>]?: MethodsOf<S>[K] extends DescMethod
    ? (request: MessageShape<MethodsOf<S>[K]["input"]>, caller: Caller) => readonly RuleViolation[]
    : never;
};

export interface ToolDefinition<S extends DescService> {
  readonly service: S;
  readonly handlers: ToolHandlers<S>;
  readonly normalise?: Normaliser<S>;
  readonly validate?: Validator<S>;
  /** Called on shutdown after the server stopped, e.g. to close a database. */
  readonly close?: () => void | Promise<void>;
}

export interface ServeOptions {
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** Port of the HTTP server with /metrics and /healthz; 0 picks a free one. */
  readonly metricsPort: number;
  /** Public keys (JWKS) that verify callers' tokens, each bound to a role, subject and scopes; tokens must name this service's tool name as audience. */
  readonly publicKeys: BoundKeySet;
  /** The JWKS file the keys came from, followed: a key revoked there stops verifying within about a second. */
  readonly publicKeysFile?: string;
  /** This tool's keys for the orchestrator's call credentials (HS256, see call-keys.ts), and the file to follow. */
  readonly callKeys?: { readonly file: string; readonly keys: readonly CallKey[] };
  /** Irreversible methods also accept a break-glass token (with a reason); off by default. */
  readonly breakGlass?: boolean;
  /** Also accept people's OpenID Connect ID tokens from this provider (the orchestrator's API). */
  readonly oidc?: OidcSettings;
  /** Unary calls handled at once; past it they are refused with RESOURCE_EXHAUSTED. */
  readonly maxConcurrent: number;
  /**
   * Unary calls one caller (by token subject: a session, a person) may have in flight at once
   * (default half of maxConcurrent, at least 1), so one caller cannot starve the others; past it
   * RESOURCE_EXHAUSTED OVERLOADED with metadata limit "caller".
   */
  readonly maxConcurrentPerCaller?: number;
  /**
   * Server streams open at once (default 256), counted apart from unary calls so that long-lived
   * streams never take the slots of short calls; past it new streams are refused with
   * RESOURCE_EXHAUSTED (TOO_MANY_STREAMS).
   */
  readonly maxStreams?: number;
  /** Server streams one caller (by token subject) may hold open at once (default 64). */
  readonly maxStreamsPerCaller?: number;
  /** How long shutdown waits for calls in flight before cancelling them. */
  readonly shutdownGraceMs: number;
  /** Connections older than this get a GOAWAY so clients re-resolve (see ToolConfig); 0 or unset = never. */
  readonly maxConnectionAgeMs?: number;
  /** Calls on an aged connection may run this long before it closes; 0 or unset = until they end. */
  readonly maxConnectionAgeGraceMs?: number;
  readonly logger: Logger;
  /** Wait suggested to callers refused for overload. */
  readonly shedRetryAfterMs?: number;
  /** Metrics to export, when the caller registers metrics of its own beside the server's. */
  readonly metrics?: ServerMetrics;
  /**
   * Also serve the contract's unary methods on the HTTP port over the Connect protocol
   * (POST /<package.Service>/<Method>, JSON or binary), through the same chain as over gRPC.
   */
  readonly connect?: boolean;
  /** Extra routes on the HTTP port (beside /metrics, /healthz and Connect's). */
  readonly http?: HttpRoute;
  /** How long a request to the HTTP port may take to arrive, headers and body (default HTTP_REQUEST_TIMEOUT_MS). */
  readonly httpRequestTimeoutMs?: number;
  /**
   * Install SIGTERM/SIGINT handlers (drain, then exit 0) before announcing "serving", so a
   * signal can never arrive between the two. For processes; tests in-process leave it off.
   */
  readonly exitOnSignals?: boolean;
  /**
   * The service's own interceptors, run on the contract's methods after auth, validation, the
   * deadline and faults, inside the response contract check (first = outermost). See docs/tool-sdk.md.
   */
  readonly interceptors?: readonly Interceptor[];
  /** Faults in force from the start (LOOPGUARD_FAULT_PROFILE); SetFaults replaces them as usual. */
  readonly faultProfile?: FaultProfile;
}

export interface ToolServer {
  readonly port: number;
  readonly metricsPort: number;
  readonly address: string;
  readonly metrics: ServerMetrics;
  readonly faults: FaultSwitch;
  /** Unary calls being handled. */
  readonly inFlight: () => number;
  readonly openStreams: () => number;
  /** NOT_SERVING → refuse new calls → wait for in-flight ones (bounded) → stop. Idempotent. */
  shutdown(): Promise<void>;
  /** Installs SIGTERM/SIGINT handlers that shut down and exit 0 (1 if shutdown failed). */
  exitOnSignals(): void;
}
