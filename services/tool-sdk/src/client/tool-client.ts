// toolClient: one client per tool, its policy derived from the contract's options and overridable
// by config. Each method's call goes through a chain of stages composed once, when the client is
// made (plan.ts: the stages and their order; stages/: one concern each; chain.ts: the shape).
import { create, type DescMethod, type DescService, type MessageInitShape } from "@bufbuild/protobuf";
import { Client, credentials } from "@grpc/grpc-js";
import { commonReasons, errorReasons, servicePolicy } from "../contract.js";
import type { InputOf, MethodKey, OutputOf } from "../method-types.js";
import { warmValidation } from "../validation.js";
import { avoidingRoundRobinServiceConfig } from "./avoiding-round-robin.js";
import { Bulkhead } from "./bulkhead.js";
import type { CallError } from "./call-error.js";
import { type ClientCallFn, composeClient, newCall, type ResultSource } from "./chain.js";
import { ClientMetrics } from "./client-metrics.js";
import { SlowReplicas } from "./hedge.js";
import { type MethodPlan, planOf, stagesOf, type ToolClientOptions } from "./plan.js";
import { replicaListTarget } from "./replica-resolver.js";
import { DEFAULT_CACHE_MAX_BYTES, ResponseCache } from "./response-cache.js";
import { RetryBudget } from "./retry.js";
import { type BreakerState, ToolBreaker } from "./stages/breaker.js";
import { DEFAULT_MAX_ANSWER_BYTES, transport } from "./stages/transport.js";

export interface ToolResult<T> {
  readonly response: T;
  /** Where the answer came from: the tool, the cache of good answers, or the declared degraded answer. */
  readonly source: ResultSource;
  /** Attempts sent to the tool (0 when the breaker or bulkhead refused the call). */
  readonly attempts: number;
  readonly latencyMs: number;
  /** Age of a cached answer. */
  readonly cacheAgeMs?: number;
  /** When a cached answer was given live (epoch ms). */
  readonly cachedAt?: number;
  /** The live failure a fallback answered for. */
  readonly liveError?: CallError;
  /** A hedge was sent (a second attempt to another replica, counted in `attempts`). */
  readonly hedged?: boolean;
  /** Which attempt's answer this is (1 = the first); with `hedged`, whether the hedge won. */
  readonly winningAttempt?: number;
}

/**
 * A handler that calls another tool passes its CallContext here (`client.call(m, request, ctx)`):
 * the call then ends by the incoming call's deadline and is cancelled with it. Explicit rather
 * than carried in AsyncLocalStorage, for its cost (docs/performance.md, "Call context").
 */
export interface CallOptions {
  /** The caller's own deadline (e.g. the session's remaining wall clock); the tighter one wins. */
  readonly deadline?: Date | undefined;
  readonly token?: string;
  readonly signal?: AbortSignal;
  /**
   * false: fail rather than answer from the cache or the declared degraded answer — for reads
   * whose live value a decision depends on (the host's checks before a side effect).
   */
  readonly fallback?: boolean;
  /**
   * false: answer from the cache (within the method's max age) but never with the declared
   * degraded answer — for a caller that would rather wait for the tool (see degradedResponse).
   */
  readonly degraded?: boolean;
  /**
   * Extra attempts (retries and hedges together) this call may send beyond its first, e.g. what is
   * left of a session's retry budget; 0 sends one attempt only. Unset: the client's own limits.
   */
  readonly maxExtraAttempts?: number;
  /** Awaited before each retry is sent (e.g. to record a RETRYING state); throwing stops the retries. */
  readonly onRetry?: (retry: {
    readonly attempt: number;
    readonly waitMs: number;
    readonly error: CallError;
  }) => void | Promise<void>;
}

function channelTarget(target: string | readonly string[]): string {
  if (typeof target === "string") return target;
  if (target.length === 1) return target[0]!;
  return replicaListTarget(target);
}

export class ToolClient<S extends DescService> {
  readonly tool: string;
  readonly #client: Client;
  readonly #methods = new Map<string, { readonly plan: MethodPlan; readonly chain: ClientCallFn }>();
  readonly #breaker: ToolBreaker;

  constructor(
    readonly service: S,
    options: ToolClientOptions,
  ) {
    this.tool = servicePolicy(service).toolName;
    const domainReasons = new Set([...errorReasons(service)].filter((r) => !commonReasons.has(r)));
    const maxAnswerBytes = options.maxAnswerBytes ?? DEFAULT_MAX_ANSWER_BYTES;
    this.#client = new Client(
      channelTarget(options.target),
      options.channelCredentials ?? credentials.createInsecure(),
      {
        // One retry layer only: ours, which obeys RetryInfo and the retry budget.
        "grpc.enable_retries": 0,
        // Round robin over every address, where a hedge can be told which replicas to stay off.
        "grpc.service_config": avoidingRoundRobinServiceConfig(),
        // The balancing policy is ours; no DNS TXT lookups for a service config.
        "grpc.service_config_disable_resolution": 1,
        // After a GOAWAY (a server's max connection age) the name is resolved again at most every
        // 5 s, not grpc-js's 30 s: clients follow a release or a scale-out within seconds of it.
        "grpc.dns_min_time_between_resolutions_ms": 5000,
        ...options.channelOptions,
        "grpc.max_receive_message_length": maxAnswerBytes,
      },
    );
    if (!options.metrics && !options.registry)
      throw new Error("toolClient needs a metrics registry or a ClientMetrics");
    const metrics = options.metrics ?? new ClientMetrics(options.registry!);
    this.#breaker = new ToolBreaker(this.tool, options.breaker ?? {}, metrics);
    const plans = service.methods.map((method) => {
      warmValidation(method);
      return planOf(this.tool, domainReasons, method, options);
    });
    const longestAge = Math.max(0, ...plans.map((p) => (p.fallback.cacheable ? p.fallback.maxAgeMs : 0)));
    const retry = options.retry ?? {};
    const hedge = options.hedge ?? {};
    const parts = {
      options,
      metrics,
      breaker: this.#breaker,
      bulkhead: new Bulkhead(options.bulkhead?.maxInFlight ?? 64, options.bulkhead?.maxQueue ?? 64),
      budget: new RetryBudget(retry.budgetRatio ?? 0.1, retry.budgetMaxTokens ?? 10),
      cache: new ResponseCache(
        options.cache?.maxEntries ?? 1000,
        Math.max(1, longestAge),
        options.cache?.maxBytes ?? DEFAULT_CACHE_MAX_BYTES,
      ),
      slow: new SlowReplicas(hedge.lossesToAvoid ?? 3, hedge.avoidForMs ?? 10_000),
      random: options.random ?? Math.random,
    };
    const send = transport(this.#client, maxAnswerBytes);
    for (const plan of plans) {
      this.#methods.set(plan.target.method.localName, { plan, chain: composeClient(stagesOf(plan, parts), send) });
    }
  }

  /** The tool's breaker state: its worst method's (open while any method's breaker is). */
  get breakerState(): BreakerState {
    return this.#breaker.state;
  }

  /** One method's breaker state: only its own failures open it. */
  breakerStateOf(name: MethodKey<S>): BreakerState {
    return this.#breaker.stateOf(name);
  }

  /** While some method's breaker is open: the first time one lets a probe through (epoch ms); else undefined. */
  get retryAt(): number | undefined {
    return this.#breaker.retryAt;
  }

  /** While the method's breaker is open: when it will let a probe through (epoch ms); else undefined. */
  retryAtOf(name: MethodKey<S>): number | undefined {
    return this.#breaker.retryAtOf(name);
  }

  /** Calls `listener` on every transition of the tool's breaker state (breakerState); returns the unsubscribe function. */
  onBreakerChange(listener: (state: BreakerState) => void): () => void {
    return this.#breaker.onChange(listener);
  }

  /** The method's declared degraded answer (CACHE_THEN_EMPTY: an empty response), or undefined when it has none. */
  degradedResponse<K extends MethodKey<S>>(name: K): OutputOf<S, K> | undefined {
    const plan = this.#methods.get(name)?.plan;
    return plan?.fallback.emptyFallback ? (create(plan.target.method.output) as OutputOf<S, K>) : undefined;
  }

  /** Calls one method of the tool. Resolves with the answer and where it came from; rejects with CallError. */
  async call<K extends MethodKey<S>>(
    name: K,
    request: InputOf<S, K>,
    options: CallOptions = {},
  ): Promise<ToolResult<OutputOf<S, K>>> {
    const method = this.#methods.get(name);
    if (!method) throw new Error(`${this.tool} has no method ${name}`);
    const started = performance.now();
    const { target } = method.plan;
    const call = newCall({
      target,
      request: create(target.method.input, request as MessageInitShape<DescMethod["input"]>),
      options,
      token: options.token,
      deadline: options.deadline?.getTime(),
    });
    const response = (await method.chain(call)) as OutputOf<S, K>;
    const { outcome } = call;
    const common = { response, source: outcome.source, attempts: call.sent.attempts };
    if (outcome.source === "live") {
      return {
        ...common,
        latencyMs: performance.now() - started,
        hedged: outcome.hedged,
        winningAttempt: outcome.winner,
      };
    }
    return {
      ...common,
      latencyMs: performance.now() - started,
      ...(outcome.cacheAgeMs === undefined ? {} : { cacheAgeMs: outcome.cacheAgeMs, cachedAt: outcome.cachedAt! }),
      ...(outcome.liveError ? { liveError: outcome.liveError } : {}),
    };
  }

  close(): void {
    this.#breaker.shutdown();
    this.#client.close();
  }
}

export function toolClient<S extends DescService>(service: S, options: ToolClientOptions): ToolClient<S> {
  return new ToolClient(service, options);
}
