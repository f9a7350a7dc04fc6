// serveTool: a grpc-js server for one contract. Every call runs the same pipeline, in this
// order: trace-context extract → drain/shed gate → auth (token → scopes) → request
// normalisation and validation → deadline/cancellation → fault injection → handler → response
// validation → error mapping → RED metrics. Beside the contract it serves grpc.health.v1,
// server reflection, the ToolAdminService (fault injection) and /metrics over HTTP.
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import {
  create,
  type DescMethod,
  type DescService,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
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
import { SpanStatusCode } from "@opentelemetry/api";
import { HealthImplementation } from "grpc-health-check";
import type { JSONWebKeySet } from "jose";
import { type Caller, TokenVerifier } from "./auth.js";
import { methodDefinition } from "./bridge.js";
import { errorReasons, methodPolicy, servicePolicy } from "./contract.js";
import { INTERNAL_MESSAGE, status, ToolError, toServiceError } from "./errors.js";
import { FaultSwitch, NO_FAULT } from "./faults.js";
import type { Logger } from "./logger.js";
import { ServerMetrics } from "./metrics.js";
import { shutdownTelemetry } from "./telemetry.js";
import { context, startServerSpan } from "./tracing.js";
import { violationsOf, warmValidation } from "./validation.js";

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

type UnaryHandler<M extends DescMethod> = M extends DescMethod & { methodKind: "unary" }
  ? (request: MessageShape<M["input"]>, ctx: CallContext) => Promise<MessageInitShape<M["output"]>>
  : never;

type StreamHandler<M extends DescMethod> = (
  request: MessageShape<M["input"]>,
  ctx: CallContext,
) => AsyncIterable<MessageInitShape<M["output"]>>;

type MethodsOf<S extends DescService> = S extends { method: infer R } ? R : never;

/** One handler per method of the contract, keyed by the method's local name (e.g. "getOrder"). */
export type ToolHandlers<S extends DescService> = {
  [K in keyof MethodsOf<S>]: MethodsOf<S>[K] extends DescMethod & { methodKind: "server_streaming" }
    ? StreamHandler<MethodsOf<S>[K]>
    : MethodsOf<S>[K] extends DescMethod
      ? UnaryHandler<MethodsOf<S>[K]>
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
  /** Public keys (JWKS) that verify callers' tokens; tokens must name this service's tool name as audience. */
  readonly publicKeys: JSONWebKeySet;
  /** Calls handled at once; past it calls are refused with RESOURCE_EXHAUSTED. */
  readonly maxConcurrent: number;
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
  /** Extra routes on the HTTP port; returns false for a path it does not serve. */
  readonly http?: (req: IncomingMessage, res: ServerResponse) => boolean;
  /**
   * Install SIGTERM/SIGINT handlers (drain, then exit 0) before announcing "serving", so a
   * signal can never arrive between the two. For processes; tests in-process leave it off.
   */
  readonly exitOnSignals?: boolean;
}

export interface ToolServer {
  readonly port: number;
  readonly metricsPort: number;
  readonly address: string;
  readonly metrics: ServerMetrics;
  readonly faults: FaultSwitch;
  readonly inFlight: () => number;
  /** NOT_SERVING → refuse new calls → wait for in-flight ones (bounded) → stop. Idempotent. */
  shutdown(): Promise<void>;
  /** Installs SIGTERM/SIGINT handlers that shut down and exit 0 (1 if shutdown failed). */
  exitOnSignals(): void;
}

const HEALTH_OVERALL = "";

function bindAsync(server: Server, address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (error, port) => (error ? reject(error) : resolve(port)));
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
  services.forEach((s) => visit(s.file));
  return out;
}

function bearerToken(call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>): string | undefined {
  const value = call.metadata.get("authorization")[0];
  if (typeof value !== "string") return undefined;
  const match = /^Bearer\s+(\S+)$/i.exec(value);
  return match?.[1];
}

export async function serveTool<S extends DescService>(definition: ToolDefinition<S>, options: ServeOptions): Promise<ToolServer> {
  const { service } = definition;
  const tool = servicePolicy(service).toolName;
  const metrics = options.metrics ?? new ServerMetrics(tool);
  const faults = new FaultSwitch();
  const verifier = new TokenVerifier(options.publicKeys, tool);
  const log = options.logger;
  const shedRetryAfterMs = options.shedRetryAfterMs ?? 100;
  let inFlight = 0;
  let draining = false;
  let drained: (() => void) | undefined;

  const server = new Server({
    "grpc.max_receive_message_length": 4 * 1024 * 1024,
    ...(options.maxConnectionAgeMs ? { "grpc.max_connection_age_ms": options.maxConnectionAgeMs } : {}),
    ...(options.maxConnectionAgeGraceMs ? { "grpc.max_connection_age_grace_ms": options.maxConnectionAgeGraceMs } : {}),
  });
  const health = new HealthImplementation({ [HEALTH_OVERALL]: "SERVING", [service.typeName]: "SERVING" });
  health.addToServer(server);
  // Health is described too, so `grpcurl`/`buf curl` can call grpc.health.v1.Health/Check by name.
  new ReflectionService({ loopguard: { fileDescriptorProtos: reflectionFiles([service, ToolAdminService, Health]) } } as never).addToServer(server);

  // Faults are injected into the contract's methods only: the admin service that switches them
  // must keep working during a drill's outage.
  function register<T extends DescService>(
    target: T,
    handlers: Record<string, unknown>,
    normalise: Record<string, unknown> | undefined,
    injectFaults: boolean,
  ): void {
    const reasons = errorReasons(target);
    const domain = servicePolicy(target).errorDomain;
    const implementation: UntypedServiceImplementation = {};
    const definitions: Record<string, ReturnType<typeof methodDefinition>> = {};
    for (const method of target.methods) {
      const handler = handlers[method.localName];
      if (typeof handler !== "function") throw new Error(`${target.typeName}: no handler for ${method.name}`);
      definitions[method.localName] = methodDefinition(method);
      warmValidation(method);
      implementation[method.localName] = unary(
        method,
        handler as (req: unknown, ctx: CallContext) => Promise<unknown>,
        normalise?.[method.localName] as ((req: unknown) => void) | undefined,
        reasons,
        domain,
        injectFaults,
      );
    }
    server.addService(definitions, implementation);
  }

  function unary(
    method: DescMethod,
    handler: (req: unknown, ctx: CallContext) => Promise<unknown>,
    normalise: ((req: unknown) => void) | undefined,
    reasons: ReadonlySet<string>,
    domain: string,
    injectFaults: boolean,
  ): handleUnaryCall<unknown, unknown> | handleServerStreamingCall<unknown, unknown> {
    const policy = methodPolicy(method);
    const streaming = method.methodKind === "server_streaming";
    const labels = { grpc_type: method.methodKind === "server_streaming" ? "server_stream" : "unary", grpc_service: method.parent.typeName, grpc_method: method.name };
    const spanName = `${method.parent.typeName}/${method.name}`;
    const shedError = new ToolError(status.RESOURCE_EXHAUSTED, "OVERLOADED", `${tool} is at its concurrency limit of ${options.maxConcurrent}`, {
      retryAfterMs: shedRetryAfterMs,
    });

    return (
      call: ServerUnaryCall<unknown, unknown> | ServerWritableStream<unknown, unknown>,
      callback?: sendUnaryData<unknown>,
    ) => {
      const started = performance.now();
      metrics.started.inc(labels);
      const { span, context: spanContext, traceId } = startServerSpan(spanName, call.metadata, {
        "rpc.system": "grpc",
        "rpc.service": method.parent.typeName,
        "rpc.method": method.name,
      });
      const callLog = log.child({ trace_id: traceId, method: method.name });
      let settled = false;

      const finish = (error: ToolError | undefined, response?: unknown) => {
        if (settled) return;
        settled = true;
        const code = error ? error.code : status.OK;
        const codeName = status[code];
        metrics.handled.inc({ ...labels, grpc_code: codeName });
        metrics.handlingSeconds.observe({ ...labels, grpc_code: codeName }, (performance.now() - started) / 1000);
        span.setAttribute("rpc.grpc.status_code", code);
        if (error) span.setStatus({ code: SpanStatusCode.ERROR, message: error.reason });
        if (callback) {
          if (error) callback(toServiceError(error, domain), null);
          else callback(null, response);
        } else {
          const stream = call as ServerWritableStream<unknown, unknown>;
          if (error) stream.emit("error", toServiceError(error, domain));
          else stream.end();
        }
        span.end();
      };

      if (draining) {
        finish(new ToolError(status.UNAVAILABLE, "SHUTTING_DOWN", `${tool} is shutting down`, { retryAfterMs: 0 }));
        return;
      }
      if (inFlight >= options.maxConcurrent) {
        metrics.shed.inc({ tool, grpc_method: method.name });
        finish(shedError);
        return;
      }
      inFlight += 1;
      metrics.inFlight.set({ tool }, inFlight);
      const abort = new AbortController();
      const onCancelled = () => abort.abort(new ToolError(status.CANCELLED, "CALL_CANCELLED", "the caller cancelled the call"));
      call.once("cancelled", onCancelled);
      let deadlineTimer: NodeJS.Timeout | undefined;

      const run = async (): Promise<unknown> => {
        const token = bearerToken(call);
        if (!token) throw new ToolError(status.UNAUTHENTICATED, "CREDENTIALS_INVALID", "missing bearer token in the authorization metadata");
        let caller: Caller;
        try {
          caller = await verifier.verify(token);
        } catch (cause) {
          throw new ToolError(status.UNAUTHENTICATED, "CREDENTIALS_INVALID", `the bearer token does not verify (expired, malformed, not signed by a trusted key, or issued for another service than ${tool})`, { cause });
        }
        if (policy.requiredScope && !caller.scopes.has(policy.requiredScope)) {
          throw new ToolError(status.PERMISSION_DENIED, "SCOPE_MISSING", `${method.name} requires scope "${policy.requiredScope}"`, {
            metadata: { required_scope: policy.requiredScope },
          });
        }
        const request = call.request;
        normalise?.(request);
        const violations = violationsOf(method.input, request as MessageShape<typeof method.input>);
        if (violations.length > 0) {
          throw new ToolError(
            status.INVALID_ARGUMENT,
            "REQUEST_INVALID",
            `invalid ${method.input.name}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
            { fieldViolations: violations },
          );
        }
        const rawDeadline = call.getDeadline();
        const deadlineMs = rawDeadline instanceof Date ? rawDeadline.getTime() : rawDeadline;
        const deadline = Number.isFinite(deadlineMs) ? new Date(deadlineMs) : undefined;
        if (deadline) {
          deadlineTimer = setTimeout(
            () => abort.abort(new ToolError(status.DEADLINE_EXCEEDED, "DEADLINE_PASSED", "the deadline passed")),
            Math.max(0, deadline.getTime() - Date.now()),
          );
        }
        const fault = injectFaults ? faults.decide(method.name) : NO_FAULT;
        if (fault.delayMs > 0) {
          metrics.faultsInjected.inc({ tool, grpc_method: method.name, kind: "latency" });
          await sleep(fault.delayMs, undefined, { signal: abort.signal }).catch(() => undefined);
        }
        if (abort.signal.aborted) throw abort.signal.reason;
        if (fault.fail) {
          metrics.faultsInjected.inc({ tool, grpc_method: method.name, kind: fault.fail });
          throw new ToolError(status.UNAVAILABLE, "FAULT_INJECTED", `${tool} fault injected (${fault.fail})`, {
            ...(fault.retryAfterMs !== undefined ? { retryAfterMs: fault.retryAfterMs } : {}),
          });
        }
        const ctx: CallContext = { signal: abort.signal, deadline, caller, traceId, log: callLog };
        const aborted = new Promise<never>((_, reject) => {
          abort.signal.addEventListener("abort", () => reject(abort.signal.reason), { once: true });
        });
        const checked = (init: unknown) => {
          const response = create(method.output, init as MessageInitShape<typeof method.output>);
          const responseViolations = violationsOf(method.output, response);
          if (responseViolations.length > 0) {
            metrics.contractViolations.inc({ tool, grpc_method: method.name });
            callLog.error("response withheld: it breaks its contract", {
              violations: responseViolations.map((v) => ({ field: v.field, reason: v.reason ?? "" })),
            });
            throw new ToolError(status.INTERNAL, "CONTRACT_VIOLATION", `${tool} produced a response that breaks its contract`);
          }
          return response;
        };
        if (streaming) {
          const stream = call as ServerWritableStream<unknown, unknown>;
          for await (const item of (handler as unknown as StreamHandler<DescMethod>)(request as never, ctx)) {
            if (abort.signal.aborted) throw abort.signal.reason;
            stream.write(checked(item));
          }
          return undefined;
        }
        const init = await Promise.race([handler(request, ctx), aborted]);
        const response = checked(init);
        if (fault.responseDelayMs > 0) {
          metrics.faultsInjected.inc({ tool, grpc_method: method.name, kind: "response_delay" });
          // Not cut short by a cancel: the point is an answer that arrives late or never.
          await sleep(fault.responseDelayMs);
        }
        return response;
      };

      context
        .with(spanContext, run)
        .then(
          (response) => finish(undefined, response),
          (error: unknown) => finish(mapError(error, reasons, callLog)),
        )
        .finally(() => {
          clearTimeout(deadlineTimer);
          call.removeListener("cancelled", onCancelled);
          inFlight -= 1;
          metrics.inFlight.set({ tool }, inFlight);
          if (draining && inFlight === 0) drained?.();
        });
    };
  }

  /** The single place an exception becomes a wire status; anything unknown becomes INTERNAL. */
  function mapError(error: unknown, reasons: ReadonlySet<string>, callLog: Logger): ToolError {
    if (error instanceof ToolError) {
      if (reasons.has(error.reason)) {
        if (error.code === status.INTERNAL || error.code === status.UNKNOWN) {
          callLog.error("call failed", { reason: error.reason, error_name: error.name });
        }
        return error;
      }
      callLog.error("handler used an error reason outside its contract", { reason: error.reason });
    } else {
      const name = error instanceof Error ? error.name : typeof error;
      callLog.error("unexpected exception in handler", { error_name: name, error_message: error instanceof Error ? error.message : "" });
    }
    return new ToolError(status.INTERNAL, "INTERNAL_ERROR", INTERNAL_MESSAGE);
  }

  register(service, definition.handlers as Record<string, unknown>, definition.normalise as Record<string, unknown> | undefined, true);
  register(
    ToolAdminService,
    {
      setFaults: async (req: { profile?: unknown }, ctx: CallContext) => {
        faults.set(req.profile as never);
        ctx.log.warn("fault profile changed", { faults: faultSummary(faults) });
        return { profile: faults.profile };
      },
      getFaults: async () => ({ profile: faults.profile }),
    },
    undefined,
    false,
  );

  const port = await bindAsync(server, `${options.host}:${options.port}`);
  const http = createServer((req, res) => {
    if (options.http?.(req, res)) return;
    if (req.url === "/metrics") {
      metrics.registry.metrics().then(
        (body) => res.writeHead(200, { "content-type": metrics.registry.contentType }).end(body),
        () => res.writeHead(500).end(),
      );
    } else if (req.url === "/healthz") {
      res.writeHead(draining ? 503 : 200, { "content-type": "text/plain" }).end(draining ? "draining\n" : "ok\n");
    } else {
      res.writeHead(404).end();
    }
  });
  const metricsPort = await listenHttp(http, options.host, options.metricsPort);
  metrics.serving.set({ tool }, 1);
  let shutdownPromise: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shutdownPromise ??= (async () => {
      draining = true;
      metrics.serving.set({ tool }, 0);
      health.setStatus(HEALTH_OVERALL, "NOT_SERVING");
      health.setStatus(service.typeName, "NOT_SERVING");
      log.info("draining", { tool, in_flight: inFlight, grace_ms: options.shutdownGraceMs });
      const idle = inFlight === 0 ? Promise.resolve() : new Promise<void>((resolve) => (drained = resolve));
      const timedOut = await Promise.race([idle.then(() => false), sleep(options.shutdownGraceMs).then(() => true)]);
      if (timedOut) log.warn("grace period over; cancelling calls in flight", { tool, in_flight: inFlight });
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, timedOut ? 0 : options.shutdownGraceMs);
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
    inFlight: () => inFlight,
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
  log.info("serving", { tool, address: `${options.host}:${port}`, metrics_port: metricsPort, limit: options.maxConcurrent });
  return toolServer;
}

function faultSummary(faults: FaultSwitch): Record<string, unknown> {
  const p = faults.profile;
  return { added_latency_ms: p.addedLatencyMs, response_delay_ms: p.responseDelayMs, error_rate: p.errorRate, outage: p.outage, retry_after_ms: p.retryAfterMs, methods: p.methods };
}
