// One deadline for all of a call's attempts and waits: the SLA timeout or the caller's own deadline,
// whichever ends first. The transport sends it as every attempt's gRPC deadline.
import type { ClientInterceptor } from "../chain.js";

/**
 * Placed inside the bulkhead: the SLA timeout is the tool's time to answer, so a call queued behind
 * a burst is not failed by the time it spent waiting there. The caller's deadline bounds both.
 */
export function deadlineStage(timeoutMs: number): ClientInterceptor {
  return (next) => (call) => {
    call.deadline = Math.min(Date.now() + timeoutMs, call.deadline ?? Number.POSITIVE_INFINITY);
    return next(call);
  };
}
