// toolClient: one client per tool, its policy derived from the contract's options and
// overridable by config. Per call: client-side validation → bulkhead → attempts (each through
// the tool's breaker, with the call's one deadline) → retries only where safe, with full-jitter
// backoff, RetryInfo obeyed and a retry budget; hedged reads (a second attempt to another replica
// after the method's p95) → response validation → cache fallbacks.
import { backoffDelayMs } from "../backoff.js";
import { setTimeout as sleep } from "node:timers/promises";
import {
  create,
  type DescMethod,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import {
  type ChannelCredentials,
  type ChannelOptions,
  Client,
  type ClientUnaryCall,
  credentials,
  Metadata,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { type Context, context as otelContext, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { bulkhead, BulkheadRejectedError, type BulkheadPolicy } from "cockatiel";
import CircuitBreaker from "opossum";
import type { Registry } from "prom-client";
import {
  commonReasons,
  Degradation,
  errorReasons,
  type MethodPolicy,
  methodPath,
  methodPolicy,
  RoutingTag,
  servicePolicy,
} from "../contract.js";
import { CALLER_ERROR_CODES, decodeStatusDetails, type FieldViolation, RETRY_IN_CALL_CODES } from "../errors.js";
import { injectContext, tracer } from "../tracing.js";
import { violationsOf, warmValidation } from "../validation.js";
import { AVOID_HEADER, avoidingRoundRobinServiceConfig, PREFER_NOT_HEADER } from "./avoiding-round-robin.js";
import { BREAKER_STATE_VALUE, ClientMetrics } from "./client-metrics.js";
import { type HedgeOverrides, LatencyWindow, SlowReplicas } from "./hedge.js";
import { replicaListTarget } from "./replica-resolver.js";
import { ResponseCache } from "./response-cache.js";
import { mayRetry, RetryBudget } from "./retry.js";

export type ResultSource = "live" | "cache" | "degraded";
export type BreakerState = keyof typeof BREAKER_STATE_VALUE;

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
  readonly liveError?: ToolCallError;
  /** A hedge was sent (a second attempt to another replica, counted in `attempts`). */
  readonly hedged?: boolean;
  /** Which attempt's answer this is (1 = the first); with `hedged`, whether the hedge won. */
  readonly winningAttempt?: number;
}

export interface ToolCallErrorOptions {
  readonly code: status;
  readonly reason?: string | undefined;
  readonly message: string;
  readonly retryAfterMs?: number | undefined;
  readonly fieldViolations?: readonly FieldViolation[];
  /** Attempts sent to the tool (0 when nothing was sent). */
  readonly attempts: number;
  readonly tool: string;
  readonly method: string;
  /** Some attempt may have reached the handler and taken effect (see ToolCallError.outcomeUnknown). */
  readonly outcomeUnknown?: boolean;
  /** The tool's handler refused with one of its own reasons (see ToolCallError.refusedByTool). */
  readonly refusedByTool?: boolean;
}

export class ToolCallError extends Error {
  override readonly name = "ToolCallError";
  readonly code: status;
  readonly reason: string | undefined;
  readonly retryAfterMs: number | undefined;
  readonly fieldViolations: readonly FieldViolation[];
  readonly attempts: number;
  readonly tool: string;
  readonly method: string;
  /**
   * True when the caller cannot tell whether the call happened: an attempt ended without an
   * answer that proves it was refused before the handler acted (a deadline, a cancel, a dropped
   * connection, an internal error). For a side effect this is "outcome unknown", not "failed".
   */
  readonly outcomeUnknown: boolean;
  /**
   * The tool itself looked at the request and refused it with a reason from its contract's closed
   * set: it was processed, and did nothing. For an idempotent side effect sent again with its key,
   * this settles what an earlier attempt did (the tool would have replayed it had it happened).
   */
  readonly refusedByTool: boolean;

  constructor(options: ToolCallErrorOptions) {
    super(options.message);
    this.code = options.code;
    this.reason = options.reason;
    this.retryAfterMs = options.retryAfterMs;
    this.fieldViolations = options.fieldViolations ?? [];
    this.attempts = options.attempts;
    this.tool = options.tool;
    this.method = options.method;
    this.outcomeUnknown = options.outcomeUnknown ?? false;
    this.refusedByTool = options.refusedByTool ?? false;
  }

  /** Whether the client would have retried it within the call (RETRY_IN_CALL_CODES). */
  get retryable(): boolean {
    return RETRY_IN_CALL_CODES.has(this.code);
  }

  /** The same failure, marked as one whose outcome is unknown. */
  withOutcomeUnknown(): ToolCallError {
    return new ToolCallError({ ...this, message: this.message, outcomeUnknown: true });
  }
}

export interface RetryOverrides {
  /** Attempts at most, the first included. */
  readonly maxAttempts?: number;
  readonly baseBackoffMs?: number;
  readonly maxBackoffMs?: number;
  /** Tokens each request adds to the retry budget; each retry takes one. */
  readonly budgetRatio?: number;
  readonly budgetMaxTokens?: number;
}

export interface BreakerOverrides {
  /** Failure percentage over the rolling window that opens the breaker. */
  readonly errorThresholdPercentage?: number;
  /** Calls in the window before the percentage counts. */
  readonly volumeThreshold?: number;
  readonly rollingWindowMs?: number;
  /** How long the breaker stays open before letting one probe through (half-open). */
  readonly resetTimeoutMs?: number;
}

export interface ToolClientOptions {
  /**
   * "host:port"; several replicas ["kb-0.kb:50061", "10.0.0.7:50061"] (host names or IP literals);
   * or a gRPC target such as "dns:///kb-search.loopguard.svc.cluster.local:50061" (every address
   * the name resolves to). Calls are balanced round robin over every address; names are resolved
   * again when a connection goes away (e.g. the server's max connection age).
   */
  readonly target: string | readonly string[];
  /** Bearer token for every call, unless a call brings its own (a session's least-privilege token). */
  readonly token?: string | (() => string | Promise<string>);
  /** Registry for the client metrics; every toolClient in a process should share one. */
  readonly registry?: Registry;
  readonly metrics?: ClientMetrics;
  /** Overrides of the contract's SLA timeout, per method local name or for all ("*"). */
  readonly timeoutMs?: Readonly<Record<string, number>>;
  readonly retry?: RetryOverrides;
  readonly breaker?: BreakerOverrides;
  readonly bulkhead?: { readonly maxInFlight?: number; readonly maxQueue?: number };
  readonly cache?: { readonly maxEntries?: number; readonly maxAgeMs?: number };
  /** Hedged reads of the methods whose contract sets option hedge. */
  readonly hedge?: HedgeOverrides;
  readonly channelCredentials?: ChannelCredentials;
  readonly channelOptions?: ChannelOptions;
  readonly random?: () => number;
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
    readonly error: ToolCallError;
  }) => void | Promise<void>;
}

type MethodsOf<S extends DescService> = S extends { method: infer R } ? R : never;
type MethodKey<S extends DescService> = keyof MethodsOf<S> & string;
type InputOf<S extends DescService, K extends MethodKey<S>> = MethodsOf<S>[K] extends DescMethod
  ? MessageInitShape<MethodsOf<S>[K]["input"]>
  : never;
type OutputOf<S extends DescService, K extends MethodKey<S>> = MethodsOf<S>[K] extends DescMethod
  ? MessageShape<MethodsOf<S>[K]["output"]>
  : never;

interface MethodPlan {
  readonly method: DescMethod;
  readonly path: string;
  readonly policy: MethodPolicy;
  readonly timeoutMs: number;
  readonly cacheable: boolean;
  /** Oldest cached answer served: the contract's cache_max_age_ms, unless config overrides it. */
  readonly cacheMaxAgeMs: number;
  readonly emptyFallback: boolean;
  readonly deserialize: (bytes: Buffer) => unknown;
  /** Hedges one call may send (0: the method is not hedged). */
  readonly maxHedges: number;
  /** The contract's fixed hedge delay; 0 means the observed p95. */
  readonly hedgeDelayMs: number;
  /** The method's recent attempt latencies, for the hedge delay. */
  readonly latency: LatencyWindow;
}

/** What every attempt of one call sends, and by when. */
interface WireCall {
  readonly plan: MethodPlan;
  readonly bytes: Buffer;
  readonly deadline: number;
  readonly token: string | undefined;
  readonly spanContext: Context;
  readonly signal: AbortSignal | undefined;
}

/** One attempt on the wire, as the hedging race sees it. */
interface Attempt {
  /** 1 for the call's first attempt; 0 until the breaker lets it go. */
  number: number;
  readonly hedge: boolean;
  call?: ClientUnaryCall;
  pending: boolean;
  /** Cancelled because another attempt answered first. */
  lost: boolean;
  readonly sentAt: number;
}

/** One call's attempts so far: how many, how many of them hedges, and the replicas that failed one. */
interface Sent {
  attempts: number;
  hedges: number;
  readonly failedPeers: string[];
}

/** Where an attempt may be sent: addresses it must not use, and ones it uses only if nothing else is ready. */
interface Route {
  readonly avoid: readonly string[];
  readonly preferNot: readonly string[];
}

/** A hedge race's loser, cancelled by us: neither a failure of the tool for the breaker nor an answer. */
class LostRace extends Error {
  override readonly name = "LostRace";
}

const passThrough = (bytes: Buffer): Buffer => bytes;

/** A method's cached answers are served up to this age when its contract names none. */
const DEFAULT_CACHE_MAX_AGE_MS = 10 * 60_000;

/** Common reasons given before any handler runs: the call was not acted on. */
const REFUSED_BEFORE_HANDLING: ReadonlySet<string> = new Set([
  "CLIENT_VALIDATION_FAILED",
  "BREAKER_OPEN",
  "BULKHEAD_FULL",
  "CREDENTIALS_INVALID",
  "SCOPE_MISSING",
  "REQUEST_INVALID",
  "OVERLOADED",
  "SHUTTING_DOWN",
  "FAULT_INJECTED",
]);

function channelTarget(target: string | readonly string[]): string {
  if (typeof target === "string") return target;
  if (target.length === 1) return target[0]!;
  return replicaListTarget(target);
}

/** Failures a fallback may answer for: the tool's trouble, never the caller's mistake. */
function fallbackMayAnswer(code: status): boolean {
  return !CALLER_ERROR_CODES.has(code);
}

export class ToolClient<S extends DescService> {
  readonly tool: string;
  readonly #client: Client;
  readonly #plans = new Map<string, MethodPlan>();
  readonly #breaker: CircuitBreaker<[() => Promise<unknown>], unknown>;
  readonly #bulkhead: BulkheadPolicy;
  readonly #budget: RetryBudget;
  readonly #cache: ResponseCache;
  readonly #metrics: ClientMetrics;
  readonly #options: ToolClientOptions;
  readonly #random: () => number;
  /** When the breaker last opened; with its reset timeout, when it will let a probe through. */
  #openedAt = 0;
  readonly #resetTimeoutMs: number;
  /** The service's own error reasons (its contract's enum), each a refusal that did nothing. */
  readonly #domainReasons: ReadonlySet<string>;
  readonly #breakerListeners = new Set<(state: BreakerState) => void>();
  readonly #slow: SlowReplicas;

  constructor(
    readonly service: S,
    options: ToolClientOptions,
  ) {
    this.tool = servicePolicy(service).toolName;
    this.#domainReasons = new Set([...errorReasons(service)].filter((r) => !commonReasons.has(r)));
    this.#options = options;
    const hedge = options.hedge ?? {};
    this.#slow = new SlowReplicas(hedge.lossesToAvoid ?? 3, hedge.avoidForMs ?? 10_000);
    this.#random = options.random ?? Math.random;
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
        ...options.channelOptions,
      },
    );
    for (const method of service.methods) {
      const policy = methodPolicy(method);
      warmValidation(method);
      const sla = policy.sla!;
      this.#plans.set(method.localName, {
        method,
        path: methodPath(method),
        policy,
        timeoutMs: options.timeoutMs?.[method.localName] ?? options.timeoutMs?.["*"] ?? sla.timeoutMs,
        cacheable:
          (policy.degradation === Degradation.CACHE || policy.degradation === Degradation.CACHE_THEN_EMPTY) &&
          !policy.tags.includes(RoutingTag.DATA_FRESHNESS_CRITICAL),
        cacheMaxAgeMs: options.cache?.maxAgeMs ?? (policy.cacheMaxAgeMs || DEFAULT_CACHE_MAX_AGE_MS),
        emptyFallback: policy.degradation === Degradation.CACHE_THEN_EMPTY,
        deserialize: (bytes) => fromBinary(method.output, bytes),
        maxHedges: policy.hedge?.enabled && hedge.enabled !== false ? policy.hedge.maxExtra || 1 : 0,
        hedgeDelayMs: policy.hedge?.delayMs ?? 0,
        latency: new LatencyWindow(),
      });
    }
    if (!options.metrics && !options.registry)
      throw new Error("toolClient needs a metrics registry or a ClientMetrics");
    this.#metrics = options.metrics ?? new ClientMetrics(options.registry!);
    const breaker = options.breaker ?? {};
    this.#resetTimeoutMs = breaker.resetTimeoutMs ?? 5_000;
    this.#breaker = new CircuitBreaker((attempt: () => Promise<unknown>) => attempt(), {
      // Deadlines are gRPC's job; the breaker only counts outcomes.
      timeout: false,
      errorThresholdPercentage: breaker.errorThresholdPercentage ?? 50,
      volumeThreshold: breaker.volumeThreshold ?? 5,
      rollingCountTimeout: breaker.rollingWindowMs ?? 10_000,
      rollingCountBuckets: 10,
      resetTimeout: this.#resetTimeoutMs,
      errorFilter: (error: unknown) =>
        error instanceof LostRace || (error instanceof ToolCallError && CALLER_ERROR_CODES.has(error.code)),
    });
    const setState = (state: BreakerState) => {
      this.#metrics.breakerState.set({ tool: this.tool }, BREAKER_STATE_VALUE[state]);
      this.#metrics.breakerTransitions.inc({ tool: this.tool, state });
      for (const listener of this.#breakerListeners) listener(state);
    };
    this.#breaker.on("open", () => {
      this.#openedAt = Date.now();
      setState("open");
    });
    this.#breaker.on("halfOpen", () => setState("half-open"));
    this.#breaker.on("close", () => setState("closed"));
    this.#metrics.breakerState.set({ tool: this.tool }, 0);
    this.#bulkhead = bulkhead(options.bulkhead?.maxInFlight ?? 64, options.bulkhead?.maxQueue ?? 64);
    const retry = options.retry ?? {};
    this.#budget = new RetryBudget(retry.budgetRatio ?? 0.1, retry.budgetMaxTokens ?? 10);
    const longestAge = Math.max(0, ...[...this.#plans.values()].map((p) => (p.cacheable ? p.cacheMaxAgeMs : 0)));
    this.#cache = new ResponseCache(options.cache?.maxEntries ?? 1000, Math.max(1, longestAge));
  }

  get breakerState(): BreakerState {
    return this.#breaker.opened ? "open" : this.#breaker.halfOpen ? "half-open" : "closed";
  }

  /** While the breaker is open: when it will let a probe through (epoch ms); else undefined. */
  get retryAt(): number | undefined {
    return this.#breaker.opened ? this.#openedAt + this.#resetTimeoutMs : undefined;
  }

  /** Calls `listener` on every breaker transition (open, half-open, closed); returns the unsubscribe function. */
  onBreakerChange(listener: (state: BreakerState) => void): () => void {
    this.#breakerListeners.add(listener);
    return () => this.#breakerListeners.delete(listener);
  }

  /** The method's declared degraded answer (CACHE_THEN_EMPTY: an empty response), or undefined when it has none. */
  degradedResponse<K extends MethodKey<S>>(name: K): OutputOf<S, K> | undefined {
    const plan = this.#plans.get(name);
    return plan?.emptyFallback ? (create(plan.method.output) as OutputOf<S, K>) : undefined;
  }

  /** Calls one method of the tool. Resolves with the answer and where it came from; rejects with ToolCallError. */
  async call<K extends MethodKey<S>>(
    name: K,
    request: InputOf<S, K>,
    options: CallOptions = {},
  ): Promise<ToolResult<OutputOf<S, K>>> {
    const plan = this.#plans.get(name);
    if (!plan) throw new Error(`${this.tool} has no method ${name}`);
    const started = performance.now();
    const message = create(plan.method.input, request as MessageInitShape<DescMethod["input"]>);
    const violations = violationsOf(plan.method.input, message);
    if (violations.length > 0) {
      this.#count(plan, "client_invalid", status.INVALID_ARGUMENT);
      throw new ToolCallError({
        code: status.INVALID_ARGUMENT,
        reason: "CLIENT_VALIDATION_FAILED",
        message: `invalid ${plan.method.input.name}: ${violations.map((v) => `${v.field}: ${v.description}`).join("; ")}`,
        fieldViolations: violations,
        attempts: 0,
        tool: this.tool,
        method: plan.method.name,
      });
    }
    const bytes = Buffer.from(toBinary(plan.method.input, message));
    const callerDeadline = options.deadline?.getTime() ?? Number.POSITIVE_INFINITY;
    const cacheKey = plan.cacheable ? ResponseCache.key(plan.path, bytes) : undefined;
    this.#budget.onRequest();

    const span = tracer.startSpan(`${plan.method.parent.typeName}/${plan.method.name}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        "rpc.system": "grpc",
        "rpc.service": plan.method.parent.typeName,
        "rpc.method": plan.method.name,
        "loopguard.tool": this.tool,
      },
    });
    const spanContext = trace.setSpan(otelContext.active(), span);
    let attempts = 0;
    const race = { hedged: false, winner: 0 };
    const endSpan = (source: ResultSource | "none") => {
      span.setAttributes({
        "loopguard.served_from": source,
        "loopguard.attempts": attempts,
        "loopguard.breaker_state": this.breakerState,
        "loopguard.hedged": race.hedged,
      });
      if (race.winner > 0) span.setAttribute("loopguard.winning_attempt", race.winner);
      span.end();
    };
    const finish = <T extends ToolResult<unknown>>(result: T): T => {
      endSpan(result.source);
      return result;
    };
    try {
      const response = await this.#bulkhead.execute(async () => {
        // The SLA timeout is the tool's time to answer, so it starts when the bulkhead lets the
        // call go: a call queued behind a burst is not failed by time it spent waiting here. The
        // caller's deadline bounds both.
        const deadline = Math.min(Date.now() + plan.timeoutMs, callerDeadline);
        const token =
          options.token ??
          (typeof this.#options.token === "function" ? await this.#options.token() : this.#options.token);
        return this.#attempts(
          plan,
          bytes,
          message as unknown as Record<string, unknown>,
          deadline,
          token,
          spanContext,
          options,
          (n) => (attempts = n),
          race,
        );
      });
      if (cacheKey) this.#cache.set(cacheKey, response, Date.now());
      this.#count(plan, "ok", status.OK);
      return finish({
        response: response as OutputOf<S, K>,
        source: "live",
        attempts,
        latencyMs: performance.now() - started,
        hedged: race.hedged,
        winningAttempt: race.winner,
      });
    } catch (thrown) {
      const error =
        thrown instanceof BulkheadRejectedError
          ? new ToolCallError({
              code: status.RESOURCE_EXHAUSTED,
              reason: "BULKHEAD_FULL",
              message: `${this.tool}: too many calls in flight`,
              attempts: 0,
              tool: this.tool,
              method: plan.method.name,
            })
          : (thrown as ToolCallError);
      if (options.fallback !== false && fallbackMayAnswer(error.code)) {
        const cached = cacheKey ? this.#cache.get(cacheKey) : undefined;
        if (cached && Date.now() - cached.storedAt <= plan.cacheMaxAgeMs) {
          this.#count(plan, "fallback_cache", error.code);
          const ageMs = Date.now() - cached.storedAt;
          return finish({
            response: cached.response as OutputOf<S, K>,
            source: "cache",
            attempts,
            latencyMs: performance.now() - started,
            cacheAgeMs: ageMs,
            cachedAt: cached.storedAt,
            liveError: error,
          });
        }
        if (plan.emptyFallback && options.degraded !== false) {
          this.#count(plan, "fallback_degraded", error.code);
          return finish({
            response: create(plan.method.output) as OutputOf<S, K>,
            source: "degraded",
            attempts,
            latencyMs: performance.now() - started,
            liveError: error,
          });
        }
      }
      this.#count(
        plan,
        error.reason === "BREAKER_OPEN"
          ? "breaker_rejected"
          : error.reason === "BULKHEAD_FULL"
            ? "bulkhead_rejected"
            : "error",
        error.code,
      );
      span.setStatus({ code: SpanStatusCode.ERROR, message: error.reason ?? status[error.code] });
      endSpan("none");
      throw error;
    }
  }

  async #attempts(
    plan: MethodPlan,
    bytes: Buffer,
    request: Record<string, unknown>,
    deadline: number,
    token: string | undefined,
    spanContext: Context,
    options: CallOptions,
    setAttempts: (n: number) => void,
    race: { hedged: boolean; winner: number },
  ): Promise<unknown> {
    const { signal } = options;
    const retryAllowed = mayRetry(plan.policy, request);
    const retry = this.#options.retry ?? {};
    const maxAttempts = Math.min(retry.maxAttempts ?? 4, 1 + (options.maxExtraAttempts ?? Number.POSITIVE_INFINITY));
    const sent: Sent = { attempts: 0, hedges: 0, failedPeers: [] };
    const wire = { plan, bytes, deadline, token, spanContext, signal };
    // Whether any attempt so far may have taken effect; a later attempt refused before its
    // handler does not make an earlier one certain.
    let uncertain = false;
    const fail = (failure: ToolCallError): never => {
      throw uncertain ? failure.withOutcomeUnknown() : failure;
    };
    for (;;) {
      if (Date.now() >= deadline) {
        fail(
          new ToolCallError({
            code: status.DEADLINE_EXCEEDED,
            reason: "DEADLINE_PASSED",
            message: `${this.tool}: no time left for ${plan.method.name}`,
            attempts: sent.attempts,
            tool: this.tool,
            method: plan.method.name,
          }),
        );
      }
      const outcome = await this.#race(wire, sent, maxAttempts, setAttempts);
      if (outcome.hedged) race.hedged = true;
      if (outcome.ok) {
        race.winner = outcome.winner;
        return outcome.response;
      }
      const failure = outcome.failure;
      if (outcome.anyMayHaveActed) uncertain = true;
      const attempt = sent.attempts;
      if (
        failure.reason === "BREAKER_OPEN" ||
        !retryAllowed ||
        !RETRY_IN_CALL_CODES.has(failure.code) ||
        attempt >= maxAttempts ||
        signal?.aborted
      ) {
        fail(failure);
      }
      const waitMs =
        failure.retryAfterMs ??
        backoffDelayMs(
          { baseMs: retry.baseBackoffMs ?? 50, maxMs: retry.maxBackoffMs ?? 1000, jitter: "full" },
          attempt,
          this.#random,
        );
      if (Date.now() + waitMs >= deadline) fail(failure);
      if (!this.#budget.tryRetry()) fail(failure);
      this.#metrics.retries.inc({ tool: this.tool, method: plan.method.name });
      try {
        await options.onRetry?.({ attempt: attempt + 1, waitMs, error: failure });
      } catch {
        fail(failure);
      }
      await sleep(waitMs, undefined, signal ? { signal } : {}).catch(() => undefined);
    }
  }

  /**
   * One attempt, and for a hedged method up to its hedges: each sent when nothing has answered
   * after the hedge delay, to a replica none of the racing attempts uses, with a retry-budget token
   * from the bucket's upper half (RetryBudget.tryHedge) and within the call's extra attempts. The
   * first answer wins and the others are cancelled. A failure ends the race only once no attempt is left in flight (a retry then follows as usual, so
   * a failed first attempt is retried, not hedged as well).
   */
  #race(
    wire: WireCall,
    sent: Sent,
    maxAttempts: number,
    setAttempts: (n: number) => void,
  ): Promise<
    | { ok: true; response: unknown; winner: number; hedged: boolean }
    | { ok: false; failure: ToolCallError; anyMayHaveActed: boolean; hedged: boolean }
  > {
    const { plan } = wire;
    const racing: Attempt[] = [];
    let anyMayHaveActed = false;
    let timer: NodeJS.Timeout | undefined;
    const delayMs = plan.maxHedges > 0 ? this.#hedgeDelayMs(plan) : Number.POSITIVE_INFINITY;
    return new Promise((resolve) => {
      let settled = false;
      const hedged = () => racing.some((a) => a.hedge);
      const launch = (hedge: boolean) => {
        const attempt: Attempt = { number: 0, hedge, pending: true, lost: false, sentAt: performance.now() };
        racing.push(attempt);
        const route: Route = {
          avoid: hedge ? racing.flatMap((a) => (a.call ? [a.call.getPeer()] : [])) : [],
          // A retry goes to another replica than the attempts that failed, when one is ready (as
          // Envoy's previous-hosts retry predicate): a replica that just died fails it again.
          preferNot: [...this.#slow.avoided(Date.now()), ...sent.failedPeers],
        };
        this.#breaker
          .fire(() => {
            // Counted once the breaker lets it go: a call the open breaker refuses sent nothing.
            attempt.number = ++sent.attempts;
            setAttempts(attempt.number);
            return this.#once(wire, attempt, route);
          })
          .then(
            (response) => {
              const peer = attempt.call?.getPeer();
              if (peer !== undefined) {
                if (!attempt.hedge && performance.now() - attempt.sentAt > delayMs) this.#slow.late(peer, Date.now());
                else this.#slow.answered(peer);
              }
              if (settled) return;
              settled = true;
              clearTimeout(timer);
              for (const other of racing) {
                if (other === attempt || !other.pending) continue;
                other.lost = true;
                other.call?.cancel();
                this.#metrics.hedgeLosersCancelled.inc({ tool: this.tool, method: plan.method.name });
                if (attempt.hedge && !other.hedge && other.call) this.#slow.late(other.call.getPeer(), Date.now());
              }
              if (attempt.hedge) this.#metrics.hedgesWon.inc({ tool: this.tool, method: plan.method.name });
              resolve({ ok: true, response, winner: attempt.number, hedged: hedged() });
            },
            (thrown: unknown) => {
              attempt.pending = false;
              // A loser cancelled after another attempt won is not a failed replica.
              if (settled) return;
              const peer = attempt.call?.getPeer();
              if (peer !== undefined) sent.failedPeers.push(peer);
              const failure = this.#asCallError(thrown, plan, sent.attempts);
              if (!this.#refusedBeforeHandling(failure)) anyMayHaveActed = true;
              if (racing.some((a) => a.pending)) return;
              settled = true;
              clearTimeout(timer);
              resolve({ ok: false, failure, anyMayHaveActed, hedged: hedged() });
            },
          );
        if (sent.hedges < plan.maxHedges) timer = setTimeout(hedgeIfStillWaiting, delayMs);
      };
      const hedgeIfStillWaiting = () => {
        if (settled || wire.signal?.aborted || sent.attempts >= maxAttempts || Date.now() >= wire.deadline) return;
        // Another replica must have answered this client before: with one address, a hedge would queue behind the same slow server.
        const inUse = new Set(racing.flatMap((a) => (a.call ? [a.call.getPeer()] : [])));
        if (![...this.#slow.seen].some((address) => !inUse.has(address))) return;
        if (!this.#budget.tryHedge()) return;
        sent.hedges++;
        this.#metrics.hedges.inc({ tool: this.tool, method: plan.method.name });
        launch(true);
      };
      launch(false);
    });
  }

  /** How long an attempt of a hedged method may go unanswered before a hedge is sent. */
  #hedgeDelayMs(plan: MethodPlan): number {
    if (plan.hedgeDelayMs > 0) return plan.hedgeDelayMs;
    const hedge = this.#options.hedge ?? {};
    const p95 = plan.latency.count >= (hedge.minSamples ?? 20) ? plan.latency.p95() : undefined;
    if (p95 === undefined) return hedge.fallbackDelayMs ?? plan.policy.sla!.p95TargetMs;
    return Math.max(hedge.minDelayMs ?? 5, p95);
  }

  /**
   * The failure proves the attempt did not act: refused before any handler ran (here, or by the
   * server's pipeline), or a refusal from the service's own closed set of reasons, which the
   * contract gives only when nothing was done. Anything else — a deadline, a cancel, a dropped
   * connection, an internal error — may have come after the handler acted.
   */
  #refusedBeforeHandling(failure: ToolCallError): boolean {
    return failure.refusedByTool || (failure.reason !== undefined && REFUSED_BEFORE_HANDLING.has(failure.reason));
  }

  #asCallError(thrown: unknown, plan: MethodPlan, attempts: number): ToolCallError {
    if (thrown instanceof ToolCallError) return thrown;
    if ((thrown as { code?: string }).code === "EOPENBREAKER") {
      // Like a server's RetryInfo: when the breaker will let a probe through.
      const retryAfterMs = Math.max(0, this.#openedAt + this.#resetTimeoutMs - Date.now());
      return new ToolCallError({
        code: status.UNAVAILABLE,
        reason: "BREAKER_OPEN",
        message: `${this.tool}: circuit breaker is open`,
        retryAfterMs,
        attempts,
        tool: this.tool,
        method: plan.method.name,
      });
    }
    return new ToolCallError({
      code: status.INTERNAL,
      reason: "INTERNAL_ERROR",
      message: `${this.tool}: ${(thrown as Error).message}`,
      attempts,
      tool: this.tool,
      method: plan.method.name,
    });
  }

  /** One attempt on the wire; resolves with the validated response. */
  #once(wire: WireCall, attempt: Attempt, route: Route): Promise<unknown> {
    const { plan, bytes, deadline, token, spanContext, signal } = wire;
    const metadata = new Metadata();
    if (token) metadata.set("authorization", `Bearer ${token}`);
    injectContext(spanContext, metadata);
    // Read by the channel's balancer at pick time and never sent (avoiding-round-robin.ts).
    if (route.avoid.length > 0) metadata.set(AVOID_HEADER, route.avoid.join(","));
    if (route.preferNot.length > 0) metadata.set(PREFER_NOT_HEADER, route.preferNot.join(","));
    const started = performance.now();
    const labels = { grpc_type: "unary", grpc_service: plan.method.parent.typeName, grpc_method: plan.method.name };
    return new Promise((resolve, reject) => {
      const call = this.#client.makeUnaryRequest(
        plan.path,
        passThrough,
        plan.deserialize,
        bytes,
        metadata,
        { deadline: new Date(deadline) },
        (error: ServiceError | null, response?: unknown) => {
          signal?.removeEventListener("abort", cancel);
          attempt.pending = false;
          const code = error ? error.code : status.OK;
          const elapsedMs = performance.now() - started;
          this.#metrics.handled.inc({ ...labels, grpc_code: status[code] });
          this.#metrics.handlingSeconds.observe({ ...labels, grpc_code: status[code] }, elapsedMs / 1000);
          if (error && attempt.lost) {
            reject(new LostRace(`${this.tool}: another attempt answered first`));
            return;
          }
          if (error) {
            const failure = decodeStatusDetails(error);
            reject(
              new ToolCallError({
                code: failure.code,
                reason: failure.reason,
                message: failure.message,
                retryAfterMs: failure.retryAfterMs,
                fieldViolations: failure.fieldViolations,
                attempts: attempt.number,
                tool: this.tool,
                method: plan.method.name,
                refusedByTool: failure.reason !== undefined && this.#domainReasons.has(failure.reason),
              }),
            );
            return;
          }
          const violations = violationsOf(plan.method.output, response as MessageShape<DescMethod["output"]>);
          if (violations.length > 0) {
            reject(
              new ToolCallError({
                code: status.INTERNAL,
                reason: "CONTRACT_VIOLATION",
                message: `${this.tool} answered ${plan.method.name} with a response that breaks its contract: ${violations.map((v) => v.field).join(", ")}`,
                attempts: attempt.number,
                tool: this.tool,
                method: plan.method.name,
              }),
            );
            return;
          }
          plan.latency.add(elapsedMs);
          resolve(response);
        },
      );
      attempt.call = call;
      const cancel = () => call.cancel();
      signal?.addEventListener("abort", cancel, { once: true });
    });
  }

  #count(plan: MethodPlan, outcome: string, code: status): void {
    this.#metrics.calls.inc({ tool: this.tool, method: plan.method.name, outcome, grpc_code: status[code] });
  }

  close(): void {
    this.#breaker.shutdown();
    this.#client.close();
  }
}

export function toolClient<S extends DescService>(service: S, options: ToolClientOptions): ToolClient<S> {
  return new ToolClient(service, options);
}
