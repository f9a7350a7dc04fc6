// serveTool: a grpc-js server for one contract. Every call runs one chain of interceptors
// (src/server/), composed once per method, outermost first: RED metrics → trace (span, trace id
// in the log) → error mapping → drain gate → request size and decoding → shed (unary calls and
// streams counted apart) → auth (token → scopes; then calls or streams per caller) → request binding
// (irreversible methods: a token bound to this exact request) → normalise, then validate (the
// contract's rules and the service's own, at once) → deadline → faults → response contract → the
// service's own interceptors → handler. Beside the contract it serves grpc.health.v1 and reflection
// (server/introspection.ts), the ToolAdminService (fault injection) and the HTTP port
// (server/http-port.ts); server/shutdown.ts drains and stops it.
import { isIPv6 } from "node:net";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Server, type UntypedServiceImplementation } from "@grpc/grpc-js";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { methodDefinition } from "./bridge.js";
import { FAULT_PROFILE_ENV } from "./config.js";
import { ConfigError } from "./settings.js";
import { Effect, errorReasons, maxRequestBytesOf, methodPolicy, servicePolicy } from "./contract.js";
import { status, ToolError } from "./errors.js";
import { FaultSwitch, faultSummary } from "./faults.js";
import { ServerMetrics } from "./metrics.js";
import { arrivalInterceptor } from "./server/arrival.js";
import { authStage, bearerCheck, bindingStage } from "./server/auth-stages.js";
import { bindAsync, grpcHandler, withSizeLimit } from "./server/grpc-handler.js";
import {
  type CallContext,
  type StreamHandler,
  streamTerminal,
  type UnaryHandler,
  unaryTerminal,
} from "./server/handler.js";
import type { UnaryRoute } from "./server/http-call.js";
import { serveHttpPort } from "./server/http-port.js";
import { MAX_VIOLATIONS } from "./server/json-body.js";
import { type CallFn, compose, type Interceptor } from "./server/interceptor.js";
import { serveIntrospection } from "./server/introspection.js";
import type { ServeOptions, ToolDefinition, ToolServer } from "./server/options.js";
import { CallSlots } from "./server/slots.js";
import {
  countRefusedEarly,
  deadlineStage,
  errorsStage,
  faultStage,
  metricsStage,
  type RequestRules,
  responseContractStage,
  undecodedStage,
  traceStage,
  validateStage,
} from "./server/stages.js";
import { exitOnSignals, shutdownOf } from "./server/shutdown.js";
import { callerVerifier } from "./token-verifier.js";
import { warmValidation } from "./validation.js";

export type { CallContext };
export type {
  HttpRoute,
  Normaliser,
  ServeOptions,
  ToolDefinition,
  ToolHandlers,
  ToolServer,
  Validator,
} from "./server/options.js";

export async function serveTool<S extends DescService>(
  definition: ToolDefinition<S>,
  options: ServeOptions,
): Promise<ToolServer> {
  const { service } = definition;
  const tool = servicePolicy(service).toolName;
  const metrics = options.metrics ?? new ServerMetrics(tool);
  const faults = new FaultSwitch();
  const log = options.logger;
  // A profile naming no method of the service would switch nothing on, and a drill would run without its fault.
  const names = service.methods.map((m) => m.name);
  const unknownMethods = (methods: readonly string[]) =>
    methods.flatMap((m, i) => (names.includes(m) ? [] : [[i, m] as const])).slice(0, MAX_VIOLATIONS);
  const notMethods = (unknown: readonly (readonly [number, string])[]) =>
    `names ${unknown.map(([, m]) => JSON.stringify(m)).join(", ")}, not a method of ${service.typeName} (${names.join(", ")})`;
  if (options.faultProfile) {
    const unknown = unknownMethods(options.faultProfile.methods);
    if (unknown.length > 0) throw new ConfigError(`${FAULT_PROFILE_ENV}: methods ${notMethods(unknown)}`);
    faults.set(options.faultProfile);
  }
  const verifier = callerVerifier(tool, options, log);
  const maxStreams = options.maxStreams ?? 256;
  const slots = new CallSlots(
    tool,
    {
      maxConcurrent: options.maxConcurrent,
      maxConcurrentPerCaller: Math.min(
        options.maxConcurrent,
        options.maxConcurrentPerCaller ?? Math.max(1, Math.floor(options.maxConcurrent / 2)),
      ),
      maxStreams,
      maxStreamsPerCaller: Math.min(maxStreams, options.maxStreamsPerCaller ?? 64),
      shedRetryAfterMs: options.shedRetryAfterMs ?? 100,
    },
    metrics,
  );

  const server = new Server({
    interceptors: [arrivalInterceptor],
    "grpc.max_receive_message_length": 4 * 1024 * 1024,
    ...(options.maxConnectionAgeMs ? { "grpc.max_connection_age_ms": options.maxConnectionAgeMs } : {}),
    ...(options.maxConnectionAgeGraceMs ? { "grpc.max_connection_age_grace_ms": options.maxConnectionAgeGraceMs } : {}),
  });
  const notServing = serveIntrospection(server, service);

  /**
   * The chain of one method, outermost first. Faults and the service's own interceptors apply to
   * the contract's methods only: the admin service that switches faults must keep working during
   * a drill's outage.
   */
  function chainOf(
    method: DescMethod,
    handler: unknown,
    hooks: { readonly normalise?: (request: unknown) => void; readonly validate?: RequestRules },
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
      undecodedStage(metrics, tool, method, maxRequestBytesOf(method)),
      streaming ? slots.streamShed(method) : slots.unaryShed(method),
      authStage(verifier, tool, method, policy.requiredScope),
      ...(policy.effect === Effect.IRREVERSIBLE_EXTERNAL
        ? [bindingStage(tool, method, options.breakGlass ?? false)]
        : []),
      streaming ? slots.streamsPerCaller(method) : slots.unaryPerCaller(method),
      validateStage(method, hooks.normalise, hooks.validate),
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

  /** The contract's unary methods' chains, for Connect callers on the HTTP port. */
  const unaryRoutes = new Map<DescMethod, UnaryRoute>();
  const admit = bearerCheck(verifier, tool);

  function register<T extends DescService>(
    target: T,
    handlers: Record<string, unknown>,
    hooks: { readonly normalise?: unknown; readonly validate?: unknown },
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
      const forMethod = <T>(perMethod: unknown) => (perMethod as Record<string, T> | undefined)?.[method.localName];
      const chain = chainOf(
        method,
        handler,
        { normalise: forMethod(hooks.normalise), validate: forMethod(hooks.validate) },
        reasons,
        own,
      );
      implementation[method.localName] = grpcHandler(method, chain, domain, log);
      if ((target as DescService) === service && method.methodKind === "unary")
        unaryRoutes.set(method, {
          chain,
          maxRequestBytes: maxRequestBytesOf(method),
          domain,
          admit,
          refusedEarly: (code) => countRefusedEarly(metrics, method, code),
        });
    }
    server.addService(definitions, implementation);
  }

  register(service, definition.handlers as Record<string, unknown>, definition, options.interceptors ?? []);
  register(
    ToolAdminService,
    {
      setFaults: async (req: { profile?: { methods: string[] } }, ctx: CallContext) => {
        const unknown = unknownMethods(req.profile?.methods ?? []);
        if (unknown.length > 0)
          throw new ToolError(status.INVALID_ARGUMENT, "REQUEST_INVALID", `profile.methods ${notMethods(unknown)}`, {
            fieldViolations: unknown.map(([i]) => ({
              field: `profile.methods[${i}]`,
              description: `is not a method of ${service.typeName}`,
            })),
          });
        faults.set(req.profile as never);
        ctx.log.warn("fault profile changed", { faults: faultSummary(faults.profile) });
        return { profile: faults.profile };
      },
      getFaults: async () => ({ profile: faults.profile }),
    },
    {},
    undefined,
  );

  // An IPv6 literal (TOOL_HOST=::1) goes in brackets before its port.
  const at = (p: number) => (isIPv6(options.host) ? `[${options.host}]:${p}` : `${options.host}:${p}`);
  const port = await bindAsync(server, at(options.port));
  const { http, port: metricsPort } = await serveHttpPort({ options, metrics, slots, unaryRoutes, log });
  metrics.serving.set({ tool }, 1);
  const shutdown = shutdownOf({
    tool,
    log,
    metrics,
    slots,
    server,
    http,
    notServing,
    graceMs: options.shutdownGraceMs,
    close: definition.close,
  });

  const toolServer: ToolServer = {
    port,
    metricsPort,
    address: at(port),
    metrics,
    faults,
    inFlight: () => slots.inFlight,
    openStreams: () => slots.streams.size,
    shutdown,
    exitOnSignals: () => exitOnSignals(shutdown, log),
  };
  if (options.exitOnSignals) toolServer.exitOnSignals();
  log.info("serving", {
    tool,
    address: at(port),
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
