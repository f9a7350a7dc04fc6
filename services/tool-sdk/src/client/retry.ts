// Which failures may be retried, how long to wait, and how many retries a tool may take.
import { Effect, type MethodPolicy } from "../contract.js";

/**
 * Read-only and idempotent methods may be retried; an irreversible one only when the request
 * carries its idempotency key (every attempt sends the same bytes, so the same key).
 */
export function mayRetry(policy: MethodPolicy, request: Record<string, unknown>): boolean {
  switch (policy.effect) {
    case Effect.READ_ONLY:
    case Effect.IDEMPOTENT_WRITE:
      return true;
    case Effect.IRREVERSIBLE_EXTERNAL: {
      const field = policy.idempotencyKeyField.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
      const key = request[field];
      return typeof key === "string" && key.length > 0;
    }
    default:
      return false;
  }
}

/**
 * A token bucket that keeps retries to a fraction of requests: each request deposits `ratio`
 * tokens (up to `maxTokens`), each retry takes one. In a full outage the tool sees at most
 * about (1 + ratio)·N attempts for N calls, never a retry storm. (gRPC's retry throttling has
 * the same shape; grpc-js's own retries are switched off so there is one retry layer only.)
 */
export class RetryBudget {
  #tokens: number;

  constructor(
    private readonly ratio: number,
    private readonly maxTokens: number,
  ) {
    this.#tokens = maxTokens;
  }

  get tokens(): number {
    return this.#tokens;
  }

  onRequest(): void {
    this.#tokens = Math.min(this.maxTokens, this.#tokens + this.ratio);
  }

  /** A retry of a failed attempt: may take the bucket's last token. */
  tryRetry(): boolean {
    return this.#take(1);
  }

  /**
   * A hedge (a second attempt while the first is only slow) may spend the upper half of the bucket
   * only: when a replica dies under load, every call in flight on it fails at once, and those
   * retries must find tokens that a run of hedges has not used up.
   */
  tryHedge(): boolean {
    return this.#take(this.maxTokens / 2 + 1);
  }

  /** Takes one token if at least `floor` are there. */
  #take(floor: number): boolean {
    if (this.#tokens < floor) return false;
    this.#tokens -= 1;
    return true;
  }
}
