// What the contract (and the client's config) says about each method, and the chain of stages
// built from it once, when the client is made. The order, outermost first: metrics, request
// validation, tracing, cache fallback, bulkhead, deadline, credentials, retry, hedging slot, breaker,
// response validation, attempt metrics; transport.ts ends the chain.
import type { DescMethod } from "@bufbuild/protobuf";
import type { ChannelCredentials, ChannelOptions } from "@grpc/grpc-js";
import type { Registry } from "prom-client";
import { Degradation, latencyObjectiveMs, type MethodPolicy, methodPolicy, RoutingTag } from "../contract.js";
import type { Bulkhead } from "./bulkhead.js";
import { type CallTarget, type ClientInterceptor, callTarget } from "./chain.js";
import type { ClientMetrics } from "./client-metrics.js";
import { type HedgeOverrides, LatencyWindow, type SlowReplicas } from "./hedge.js";
import type { ResponseCache } from "./response-cache.js";
import type { RetryBudget } from "./retry.js";
import { type BreakerOverrides, breakerStage, type ToolBreaker } from "./stages/breaker.js";
import { bulkheadStage } from "./stages/bulkhead.js";
import { cacheStage, type Fallback } from "./stages/cache.js";
import { credentialsStage, type TokenSource } from "./stages/credentials.js";
import { deadlineStage } from "./stages/deadline.js";
import { type HedgeSlot, hedgeStage } from "./stages/hedge.js";
import { attemptMetricsStage, callMetricsStage } from "./stages/metrics.js";
import { type RetryOverrides, retryStage } from "./stages/retry.js";
import { tracingStage } from "./stages/tracing.js";
import { requestValidationStage, responseValidationStage } from "./stages/validation.js";

export interface ToolClientOptions {
  /**
   * "host:port"; several replicas ["kb-0.kb:50061", "10.0.0.7:50061"] (host names or IP literals);
   * or a gRPC target such as "dns:///kb-search.loopguard.svc.cluster.local:50061" (every address
   * the name resolves to). Calls are balanced round robin over every address; names are resolved
   * again when a connection goes away (e.g. the server's max connection age).
   */
  readonly target: string | readonly string[];
  /** Bearer token for every call, unless a call brings its own (a session's least-privilege token). */
  readonly token?: TokenSource;
  /** Registry for the client metrics; every toolClient in a process should share one. */
  readonly registry?: Registry;
  readonly metrics?: ClientMetrics;
  /** Overrides of the contract's SLA timeout, per method local name or for all ("*"). */
  readonly timeoutMs?: Readonly<Record<string, number>>;
  readonly retry?: RetryOverrides;
  readonly breaker?: BreakerOverrides;
  readonly bulkhead?: { readonly maxInFlight?: number; readonly maxQueue?: number };
  /** The fallback cache: entries (default 1000), age, and bytes of keys and responses on the wire (default 16 MiB). */
  readonly cache?: { readonly maxEntries?: number; readonly maxAgeMs?: number; readonly maxBytes?: number };
  /** Hedged reads of the methods whose contract sets option hedge. */
  readonly hedge?: HedgeOverrides;
  readonly channelCredentials?: ChannelCredentials;
  readonly channelOptions?: ChannelOptions;
  /**
   * The largest answer taken, in bytes on the wire (default grpc-js's 4 MiB); a larger one is refused from its length
   * prefix, undecoded: INTERNAL ANSWER_TOO_LARGE (transport.ts).
   */
  readonly maxAnswerBytes?: number;
  readonly random?: () => number;
}

export interface MethodPlan {
  readonly target: CallTarget;
  readonly policy: MethodPolicy;
  readonly timeoutMs: number;
  /** An attempt's timeout counts against the tool once its caller gave it this long: the method's latency objective. */
  readonly timeoutCountedMs: number;
  readonly fallback: Fallback;
  readonly hedge: HedgeSlot;
}

/** A method's cached answers are served up to this age when its contract names none. */
const DEFAULT_CACHE_MAX_AGE_MS = 10 * 60_000;

export function planOf(
  tool: string,
  domainReasons: ReadonlySet<string>,
  method: DescMethod,
  options: ToolClientOptions,
): MethodPlan {
  const policy = methodPolicy(method);
  const sla = policy.sla!;
  const cacheDegradation =
    policy.degradation === Degradation.CACHE || policy.degradation === Degradation.CACHE_THEN_EMPTY;
  const timeoutMs = options.timeoutMs?.[method.localName] ?? options.timeoutMs?.["*"] ?? sla.timeoutMs;
  return {
    target: callTarget(tool, method, domainReasons),
    policy,
    timeoutMs,
    timeoutCountedMs: latencyObjectiveMs(method, timeoutMs),
    fallback: {
      cacheable: cacheDegradation && !policy.tags.includes(RoutingTag.DATA_FRESHNESS_CRITICAL),
      maxAgeMs: options.cache?.maxAgeMs ?? (policy.cacheMaxAgeMs || DEFAULT_CACHE_MAX_AGE_MS),
      emptyFallback: policy.degradation === Degradation.CACHE_THEN_EMPTY,
    },
    hedge: {
      maxHedges: policy.hedge?.enabled && options.hedge?.enabled !== false ? policy.hedge.maxExtra || 1 : 0,
      fixedDelayMs: policy.hedge?.delayMs ?? 0,
      slaP95Ms: sla.p95TargetMs,
      latency: new LatencyWindow(),
    },
  };
}

/** What the stages of all of one client's methods share: one bulkhead, budget and cache per tool, its breakers (one per method). */
export interface ClientParts {
  readonly options: ToolClientOptions;
  readonly metrics: ClientMetrics;
  readonly breaker: ToolBreaker;
  readonly bulkhead: Bulkhead;
  readonly budget: RetryBudget;
  readonly cache: ResponseCache;
  readonly slow: SlowReplicas;
  readonly random: () => number;
}

export function stagesOf(plan: MethodPlan, parts: ClientParts): ClientInterceptor[] {
  const { options, metrics, breaker, budget } = parts;
  const { fallback } = plan;
  return [
    callMetricsStage(metrics, plan),
    requestValidationStage,
    tracingStage(() => breaker.stateOf(plan.target.method.localName)),
    ...(fallback.cacheable || fallback.emptyFallback ? [cacheStage(fallback, parts.cache)] : []),
    bulkheadStage(parts.bulkhead),
    deadlineStage(plan.timeoutMs, plan.timeoutCountedMs),
    ...(options.token === undefined ? [] : [credentialsStage(options.token)]),
    retryStage(plan.policy, options.retry ?? {}, { budget, metrics, random: parts.random }),
    hedgeStage(plan.hedge, { overrides: options.hedge ?? {}, slow: parts.slow, budget, metrics }),
    breakerStage(breaker),
    responseValidationStage,
    attemptMetricsStage(metrics),
  ];
}
