// serveTool: a grpc-js server for one contract. Every call runs one chain of interceptors
// (src/server/), composed once per method, outermost first: RED metrics → trace (span, trace id
// in the log) → error mapping → drain gate → request size → shed (unary calls and streams counted
// apart) → auth (token → scopes; then streams per caller) → request binding (irreversible methods:
// a token bound to this exact request) → normalise and validate → deadline →
// faults → response contract → the service's own interceptors → handler. Beside the contract it
// serves grpc.health.v1, server reflection, the ToolAdminService (fault injection) and /metrics
// over HTTP.
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { type DescMethod, type DescService, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import {
  type handleServerStreamingCall,
  type handleUnaryCall,
  Server,
  ServerCredentials,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { Health } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { HealthImplementation } from "grpc-health-check";
import { methodDefinition } from "./bridge.js";
import { Effect, errorReasons, maxRequestBytesOf, methodPolicy, servicePolicy } from "./contract.js";
import { status, ToolError, toServiceError } from "./errors.js";
import { FAULT_PROFILE_ENV } from "./config.js";
import { ConfigError } from "./settings.js";
import { FaultSwitch, faultSummary } from "./faults.js";
import type { FaultProfile } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import type { Logger } from "./logger.js";
import type { BoundKeySet } from "./key-bindings.js";
import { ServerMetrics } from "./metrics.js";
import { type OidcSettings, OidcVerifier } from "./oidc.js";
import { type UnaryInvoker, type UnaryRoute, unaryInvoker } from "./server/http-call.js";
import {
  type CallContext,
  noStream,
  type StreamHandler,
  streamTerminal,
  type UnaryHandler,
  unaryTerminal,
} from "./server/handler.js";
import { type CallFn, compose, type Interceptor, OversizedRequest, type ServerCall } from "./server/interceptor.js";
import { CallSlots } from "./server/slots.js";
import {
  authStage,
  bindingStage,
  deadlineStage,
  errorsStage,
  faultStage,
  metricsStage,
  responseContractStage,
  sizeStage,
  traceStage,
  validateStage,
} from "./server/stages.js";
import { shutdownTelemetry } from "./telemetry.js";
import { TokenVerifier } from "./token-verifier.js";
import { warmValidation } from "./validation.js";

export type { CallContext, UnaryInvoker };

/** An extra route on the HTTP port: answers and returns true, or returns false for a path it does not serve. */
export type HttpRoute = (req: IncomingMessage, res: ServerResponse, invoke: UnaryInvoker) => boolean;

type MethodsOf<S extends DescService> = S extends { method: infer R } ? R : never;

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

export interface ToolDefinition<S extends DescService> {
  readonly service: S;
  readonly handlers: ToolHandlers<S>;
  readonly normalise?: Normaliser<S>;
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
  /** Irreversible methods also accept a break-glass token (with a reason); off by default. */
  readonly breakGlass?: boolean;
  /** Also accept people's OpenID Connect ID tokens from this provider (the orchestrator's API). */
  readonly oidc?: OidcSettings;
  /** Unary calls handled at once; past it they are refused with RESOURCE_EXHAUSTED. */
  readonly maxConcurrent: number;
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
  /** Extra routes on the HTTP port; `invoke` calls a unary method of the contract through its chain. */
  readonly http?: HttpRoute;
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

const HEALTH_OVERALL = "";

async function writeTo(
  stream: ServerWritableStream<unknown, unknown>,
  message: unknown,
  signal: AbortSignal,
): Promise<void> {
  // A slow reader holds the stream back rather than have its messages pile up here.
  if (!stream.write(message)) await once(stream, "drain", { signal }).catch(() => undefined);
}

function bindAsync(server: Server, address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, port) =>
      error ? reject(error) : resolve(port),
    );
  });
}

function listenHttp(server: HttpServer, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
  });
}

/** FileDescriptorProtos of a file and everything it imports, for server reflection. */
function reflectionFiles(services: readonly DescService[]): Uint8Array[] {
  const seen = new Set<string>();
  const out: Uint8Array[] = [];
  const visit = (file: DescService["file"]) => {
    if (seen.has(file.name)) return;
    seen.add(file.name);
    file.dependencies.forEach(visit);
    out.push(toBinary(FileDescriptorProtoSchema, file.proto));
  };
  for (const s of services) visit(s.file);
  return out;
}

export async function serveTool<S extends DescService>(
  definition: ToolDefinition<S>,
  options: ServeOptions,
): Promise<ToolServer> {
  const { service } = definition;
  const tool = servicePolicy(service).toolName;
  const metrics = options.metrics ?? new ServerMetrics(tool);
  const faults = new FaultSwitch();
  const log = options.logger;
  if (options.faultProfile) {
    const names = service.methods.map((m) => m.name);
    const unknown = options.faultProfile.methods.filter((m) => !names.includes(m));
    if (unknown.length > 0)
      throw new ConfigError(
        `${FAULT_PROFILE_ENV}: methods names ${unknown.join(", ")}, not a method of ${service.typeName} (${names.join(", ")})`,
      );
    faults.set(options.faultProfile);
  }
  const verifier = new TokenVerifier(options.publicKeys, tool, {
    ...(options.publicKeysFile ? { file: options.publicKeysFile } : {}),
    ...(options.oidc ? { oidc: new OidcVerifier(options.oidc) } : {}),
    onReload: (outcome) =>
      "error" in outcome
        ? log.error("trusted keys not reloaded", { reason: outcome.error })
        : log.warn("trusted keys reloaded", { kids: outcome.kids }),
  });
  const maxStreams = options.maxStreams ?? 256;
  const slots = new CallSlots(
    tool,
    {
      maxConcurrent: options.maxConcurrent,
      maxStreams,
      maxStreamsPerCaller: Math.min(maxStreams, options.maxStreamsPerCaller ?? 64),
      shedRetryAfterMs: options.shedRetryAfterMs ?? 100,
    },
    metrics,
  );

  const server = new Server({
    "grpc.max_receive_message_length": 4 * 1024 * 1024,
    ...(options.maxConnectionAgeMs ? { "grpc.max_connection_age_ms": options.maxConnectionAgeMs } : {}),
    ...(options.maxConnectionAgeGraceMs ? { "grpc.max_connection_age_grace_ms": options.maxConnectionAgeGraceMs } : {}),
  });
  const health = new HealthImplementation({ [HEALTH_OVERALL]: "SERVING", [service.typeName]: "SERVING" });
  health.addToServer(server);
  // Health is described too, so `grpcurl`/`buf curl` can call grpc.health.v1.Health/Check by name.
  new ReflectionService({
    loopguard: { fileDescriptorProtos: reflectionFiles([service, ToolAdminService, Health]) },
  } as never).addToServer(server);

  /**
   * The chain of one method, outermost first. Faults and the service's own interceptors apply to
   * the contract's methods only: the admin service that switches faults must keep working during
   * a drill's outage.
   */
  function chainOf(
    method: DescMethod,
    handler: unknown,
    normalise: ((request: unknown) => void) | undefined,
    reasons: ReadonlySet<string>,
    own: readonly Interceptor[] | undefined,
  ): CallFn {
    const policy = methodPolicy(method);
    const streaming = method.methodKind === "server_streaming";
    const stages: Interceptor[] = [
      metricsStage(metrics, method),
      traceStage(method, log),
      errorsStage(reasons),
      slots.drainGate(),
      sizeStage(metrics, tool, method, maxRequestBytesOf(method)),
      streaming ? slots.streamShed(method) : slots.unaryShed(method),
      authStage(verifier, tool, method, policy.requiredScope),
      ...(policy.effect === Effect.IRREVERSIBLE_EXTERNAL
        ? [bindingStage(tool, method, options.breakGlass ?? false)]
        : []),
      ...(streaming ? [slots.streamsPerCaller(method)] : []),
      validateStage(method, normalise),
      deadlineStage,
      ...(own ? [faultStage(faults, metrics, tool, method)] : []),
      responseContractStage(metrics, tool, method),
      ...(own ?? []),
    ];
    return compose(
      stages,
      streaming
        ? streamTerminal(handler as StreamHandler<DescMethod>)
        : unaryTerminal(handler as UnaryHandler<DescMethod>),
    );
  }

  /** The contract's unary methods' chains, for HTTP callers (Connect and options.http). */
  const unaryRoutes = new Map<DescMethod, UnaryRoute>();

  function register<T extends DescService>(
    target: T,
    handlers: Record<string, unknown>,
    normalise: Record<string, unknown> | undefined,
    own: readonly Interceptor[] | undefined,
  ): void {
    const reasons = errorReasons(target);
    const domain = servicePolicy(target).errorDomain;
    const implementation: UntypedServiceImplementation = {};
    const definitions: Record<string, ReturnType<typeof methodDefinition>> = {};
    for (const method of target.methods) {
      const handler = handlers[method.localName];
      if (typeof handler !== "function") throw new Error(`${target.typeName}: no handler for ${method.name}`);
      definitions[method.localName] = withSizeLimit(method, methodDefinition(method));
      warmValidation(method);
      const chain = chainOf(
        method,
        handler,
        normalise?.[method.localName] as ((req: unknown) => void) | undefined,
        reasons,
        own,
      );
      implementation[method.localName] = grpcHandler(method, chain, domain);
      if ((target as DescService) === service && method.methodKind === "unary")
        unaryRoutes.set(method, { chain, maxRequestBytes: maxRequestBytesOf(method), domain });
    }
    server.addService(definitions, implementation);
  }

  /** Adapts a chain to grpc-js: builds the ServerCall, ends the call with the chain's outcome. */
  function grpcHandler(
    method: DescMethod,
    chain: CallFn,
    domain: string,
  ): handleUnaryCall<unknown, unknown> | handleServerStreamingCall<unknown, unknown> {
    return (
      grpcCall: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>,
      callback?: sendUnaryData<unknown>,
    ) => {
      const abort = new AbortController();
      const onCancelled = () =>
        abort.abort(new ToolError(status.CANCELLED, "CALL_CANCELLED", "the caller cancelled the call"));
      grpcCall.once("cancelled", onCancelled);
      const rawDeadline = grpcCall.getDeadline();
      const deadlineMs = rawDeadline instanceof Date ? rawDeadline.getTime() : rawDeadline;
      const stream = callback ? undefined : (grpcCall as ServerWritableStream<unknown, unknown>);
      const call: ServerCall = {
        method,
        request: grpcCall.request,
        metadata: grpcCall.metadata,
        deadline: Number.isFinite(deadlineMs) ? new Date(deadlineMs) : undefined,
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

  /** Refuses to decode a request above its method's limit: the chain answers it without work. */
  function withSizeLimit(
    method: DescMethod,
    definition: ReturnType<typeof methodDefinition>,
  ): ReturnType<typeof methodDefinition> {
    const limit = maxRequestBytesOf(method);
    return {
      ...definition,
      requestDeserialize: (bytes: Buffer) =>
        bytes.length > limit ? (new OversizedRequest(bytes.length) as never) : fromBinary(method.input, bytes),
    };
  }

  register(
    service,
    definition.handlers as Record<string, unknown>,
    definition.normalise as Record<string, unknown> | undefined,
    options.interceptors ?? [],
  );
  register(
    ToolAdminService,
    {
      setFaults: async (req: { profile?: unknown }, ctx: CallContext) => {
        faults.set(req.profile as never);
        ctx.log.warn("fault profile changed", { faults: faultSummary(faults.profile) });
        return { profile: faults.profile };
      },
      getFaults: async () => ({ profile: faults.profile }),
    },
    undefined,
    undefined,
  );

  const port = await bindAsync(server, `${options.host}:${options.port}`);
  const invoke = unaryInvoker(unaryRoutes, log);
  const routeHttp = (req: IncomingMessage, res: ServerResponse): void => {
    if (options.http?.(req, res, invoke)) return;
    if (req.url === "/metrics") {
      metrics.registry.metrics().then(
        (body) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(body),
        () => res.writeHead(500).end(),
      );
    } else if (req.url === "/healthz") {
      res
        .writeHead(slots.draining ? 503 : 200, { "content-type": "text/plain" })
        .end(slots.draining ? "draining\n" : "ok\n");
    } else {
      res.writeHead(404).end();
    }
  };
  const http = createServer(
    options.connect ? (await import("./server/connect.js")).connectRoutes(unaryRoutes, invoke, routeHttp) : routeHttp,
  );
  const metricsPort = await listenHttp(http, options.host, options.metricsPort);
  metrics.serving.set({ tool }, 1);
  let shutdownPromise: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shutdownPromise ??= (async () => {
      metrics.serving.set({ tool }, 0);
      health.setStatus(HEALTH_OVERALL, "NOT_SERVING");
      health.setStatus(service.typeName, "NOT_SERVING");
      log.info("draining", {
        tool,
        in_flight: slots.inFlight,
        streams: slots.streams.size,
        grace_ms: options.shutdownGraceMs,
      });
      // Streams may stay open for as long as what they follow (an hour): they are ended now, and
      // their callers (told UNAVAILABLE, retry at once) reopen them on another replica.
      const quiet = slots.drain(
        new ToolError(status.UNAVAILABLE, "SHUTTING_DOWN", `${tool} is shutting down; reopen the stream`, {
          retryAfterMs: 0,
        }),
      );
      const timedOut = await Promise.race([quiet.then(() => false), sleep(options.shutdownGraceMs).then(() => true)]);
      if (timedOut) log.warn("grace period over; cancelling calls in flight", { tool, in_flight: slots.inFlight });
      await new Promise<void>((resolve) => {
        const force = setTimeout(
          () => {
            server.forceShutdown();
            resolve();
          },
          timedOut ? 0 : options.shutdownGraceMs,
        );
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
      await new Promise<void>((resolve) => http.close(() => resolve()));
      http.closeAllConnections();
      await definition.close?.();
      log.info("stopped", { tool });
    })();
    return shutdownPromise;
  };

  const toolServer: ToolServer = {
    port,
    metricsPort,
    address: `${options.host}:${port}`,
    metrics,
    faults,
    inFlight: () => slots.inFlight,
    openStreams: () => slots.streams.size,
    shutdown,
    exitOnSignals() {
      for (const signal of ["SIGTERM", "SIGINT"] as const) {
        process.once(signal, () => {
          log.info("signal received", { signal });
          shutdown()
            .then(shutdownTelemetry)
            .then(
              () => process.exit(0),
              (error: unknown) => {
                log.error("shutdown failed", { error_name: error instanceof Error ? error.name : "unknown" });
                process.exit(1);
              },
            );
        });
      }
    },
  };
  if (options.exitOnSignals) toolServer.exitOnSignals();
  log.info("serving", {
    tool,
    address: `${options.host}:${port}`,
    metrics_port: metricsPort,
    limit: options.maxConcurrent,
    max_streams: maxStreams,
    max_streams_per_caller: slots.limits.maxStreamsPerCaller,
    break_glass: options.breakGlass ? "on" : "off",
  });
  if (options.breakGlass)
    log.warn("break-glass is on: irreversible methods accept break-glass tokens with a reason", { tool });
  if (options.faultProfile)
    log.warn(`faults injected from the start (${FAULT_PROFILE_ENV})`, { tool, faults: faultSummary(faults.profile) });
  return toolServer;
}
