// One circuit breaker per tool (opossum), around each attempt: an open breaker refuses with
// UNAVAILABLE and when it will let a probe through; caller mistakes and lost hedge races never trip it.
import { status } from "@grpc/grpc-js";
import CircuitBreaker from "opossum";
import { CALLER_ERROR_CODES } from "../../errors.js";
import { CallError } from "../call-error.js";
import type { ClientInterceptor } from "../chain.js";
import { BREAKER_STATE_VALUE, type ClientMetrics } from "../client-metrics.js";

export type BreakerState = keyof typeof BREAKER_STATE_VALUE;

export interface BreakerOverrides {
  /** Failure percentage over the rolling window that opens the breaker. */
  readonly errorThresholdPercentage?: number;
  /** Calls in the window before the percentage counts. */
  readonly volumeThreshold?: number;
  readonly rollingWindowMs?: number;
  /** How long the breaker stays open before letting one probe through (half-open). */
  readonly resetTimeoutMs?: number;
}

/** A hedge race's loser, cancelled by us: neither a failure of the tool for the breaker nor an answer. */
export class LostRace extends Error {
  override readonly name = "LostRace";
}

export class ToolBreaker {
  readonly #breaker: CircuitBreaker<[() => Promise<unknown>], unknown>;
  readonly #resetTimeoutMs: number;
  readonly #listeners = new Set<(state: BreakerState) => void>();
  /** When the breaker last opened; with its reset timeout, when it will let a probe through. */
  #openedAt = 0;

  constructor(tool: string, overrides: BreakerOverrides, metrics: ClientMetrics) {
    this.#resetTimeoutMs = overrides.resetTimeoutMs ?? 5_000;
    this.#breaker = new CircuitBreaker((attempt: () => Promise<unknown>) => attempt(), {
      // Deadlines are gRPC's job; the breaker only counts outcomes.
      timeout: false,
      errorThresholdPercentage: overrides.errorThresholdPercentage ?? 50,
      volumeThreshold: overrides.volumeThreshold ?? 5,
      rollingCountTimeout: overrides.rollingWindowMs ?? 10_000,
      rollingCountBuckets: 10,
      resetTimeout: this.#resetTimeoutMs,
      errorFilter: (error: unknown) =>
        error instanceof LostRace || (error instanceof CallError && CALLER_ERROR_CODES.has(error.code)),
    });
    const setState = (state: BreakerState) => {
      metrics.breakerState.set({ tool }, BREAKER_STATE_VALUE[state]);
      metrics.breakerTransitions.inc({ tool, state });
      for (const listener of this.#listeners) listener(state);
    };
    this.#breaker.on("open", () => {
      this.#openedAt = Date.now();
      setState("open");
    });
    this.#breaker.on("halfOpen", () => setState("half-open"));
    this.#breaker.on("close", () => setState("closed"));
    metrics.breakerState.set({ tool }, 0);
    // Every transition's series at 0 from the start: one that first appears holding its count loses
    // it to increase(), and the alert on a breaker that opened would miss its first opening.
    for (const state of ["open", "half-open", "closed"] as const) metrics.breakerTransitions.inc({ tool, state }, 0);
  }

  get state(): BreakerState {
    return this.#breaker.opened ? "open" : this.#breaker.halfOpen ? "half-open" : "closed";
  }

  /** While the breaker is open: when it will let a probe through (epoch ms); else undefined. */
  get retryAt(): number | undefined {
    return this.#breaker.opened ? this.#openedAt + this.#resetTimeoutMs : undefined;
  }

  /** Calls `listener` on every transition (open, half-open, closed); returns the unsubscribe function. */
  onChange(listener: (state: BreakerState) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  fire(attempt: () => Promise<unknown>): Promise<unknown> {
    return this.#breaker.fire(attempt);
  }

  shutdown(): void {
    this.#breaker.shutdown();
  }
}

export function breakerStage(breaker: ToolBreaker): ClientInterceptor {
  return (next) => (call) =>
    breaker
      .fire(() =>
        next(call).catch((thrown: unknown) => {
          throw call.attempt.lost ? new LostRace(`${call.target.tool}: another attempt answered first`) : thrown;
        }),
      )
      .catch((thrown: unknown) => {
        if (thrown instanceof CallError || thrown instanceof LostRace) throw thrown;
        const { tool, method } = call.target;
        if ((thrown as { code?: string }).code === "EOPENBREAKER") {
          throw new CallError({
            code: status.UNAVAILABLE,
            reason: "BREAKER_OPEN",
            message: `${tool}: circuit breaker is open`,
            // Like a server's RetryInfo: when the breaker will let a probe through.
            retryAfterMs: Math.max(0, (breaker.retryAt ?? Date.now()) - Date.now()),
            attempts: call.sent.attempts,
            tool,
            method: method.name,
          });
        }
        throw new CallError({
          code: status.INTERNAL,
          reason: "INTERNAL_ERROR",
          message: `${tool}: ${(thrown as Error).message}`,
          attempts: call.sent.attempts,
          tool,
          method: method.name,
        });
      });
}
