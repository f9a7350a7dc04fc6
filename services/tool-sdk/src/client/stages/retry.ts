// Retries of a failed attempt: only where the contract says it is safe, only on retryable codes,
// with full-jitter backoff or the server's RetryInfo, within the call's deadline and the retry budget.
import { setTimeout as sleep } from "node:timers/promises";
import { status } from "@grpc/grpc-js";
import { type Backoff, backoffDelayMs } from "../../backoff.js";
import type { MethodPolicy } from "../../contract.js";
import { RETRY_IN_CALL_CODES } from "../../errors.js";
import { type CallError, clientFailure } from "../call-error.js";
import type { ClientCall, ClientInterceptor } from "../chain.js";
import type { ClientMetrics } from "../client-metrics.js";
import { mayRetry, type RetryBudget } from "../retry.js";

export interface RetryOverrides {
  /** Attempts at most, the first included. */
  readonly maxAttempts?: number;
  readonly baseBackoffMs?: number;
  readonly maxBackoffMs?: number;
  /** Tokens each request adds to the retry budget; each retry takes one. */
  readonly budgetRatio?: number;
  readonly budgetMaxTokens?: number;
}

export interface RetryParts {
  readonly budget: RetryBudget;
  readonly metrics: ClientMetrics;
  readonly random: () => number;
}

const noTimeLeft = (call: ClientCall) =>
  clientFailure(call, status.DEADLINE_EXCEEDED, "DEADLINE_PASSED", `no time left for ${call.target.method.name}`);

export function retryStage(policy: MethodPolicy, overrides: RetryOverrides, parts: RetryParts): ClientInterceptor {
  const backoff: Backoff = {
    baseMs: overrides.baseBackoffMs ?? 50,
    maxMs: overrides.maxBackoffMs ?? 1000,
    jitter: "full",
  };
  const maxAttempts = overrides.maxAttempts ?? 4;
  return (next) => async (call) => {
    const { budget, metrics } = parts;
    const { options, sent } = call;
    budget.onRequest();
    const retryAllowed = mayRetry(policy, call.request as unknown as Record<string, unknown>);
    sent.maxAttempts = Math.min(maxAttempts, 1 + (options.maxExtraAttempts ?? Number.POSITIVE_INFINITY));
    const deadline = call.deadline ?? Number.POSITIVE_INFINITY;
    // Whether any attempt so far may have taken effect; a later attempt refused before its
    // handler does not make an earlier one certain.
    const fail = (failure: CallError): never => {
      throw sent.mayHaveActed ? failure.withOutcomeUnknown() : failure;
    };
    for (;;) {
      if (Date.now() >= deadline) fail(noTimeLeft(call));
      let failure: CallError;
      try {
        return await next(call);
      } catch (thrown) {
        failure = thrown as CallError;
      }
      const attempt = sent.attempts;
      if (
        failure.reason === "BREAKER_OPEN" ||
        !retryAllowed ||
        !RETRY_IN_CALL_CODES.has(failure.code) ||
        attempt >= sent.maxAttempts ||
        options.signal?.aborted
      ) {
        fail(failure);
      }
      const waitMs = failure.retryAfterMs ?? backoffDelayMs(backoff, attempt, parts.random);
      if (Date.now() + waitMs >= deadline) fail(failure);
      if (!budget.tryRetry()) fail(failure);
      metrics.retries.inc({ tool: call.target.tool, method: call.target.method.name });
      try {
        await options.onRetry?.({ attempt: attempt + 1, waitMs, error: failure });
      } catch {
        fail(failure);
      }
      await sleep(waitMs, undefined, options.signal ? { signal: options.signal } : {}).catch(() => undefined);
      // The caller gave up during the wait (its run stopped): no attempt more.
      if (options.signal?.aborted) fail(failure);
    }
  };
}
