// One deadline for all of a call's attempts and waits: the SLA timeout or the caller's own deadline,
// whichever ends first. The transport sends it as every attempt's gRPC deadline.
import type { ClientInterceptor } from "../chain.js";

/**
 * Placed inside the bulkhead: the SLA timeout is the tool's time to answer, so a call queued behind
 * a burst is not failed by the time it spent waiting there. The caller's deadline bounds both.
 *
 * A caller's deadline that leaves less than `countedMs` marks the call cut short: its timeout is no
 * sign of a slow tool (breaker.ts). Not every deadline short of the SLA timeout is: a caller that
 * means "the SLA timeout" computes its deadline a few ms before the call (the orchestrator, after
 * fetching a session token) or waits in the bulkhead first, and a hung tool must still open the breaker.
 */
export function deadlineStage(timeoutMs: number, countedMs: number): ClientInterceptor {
  return (next) => (call) => {
    const now = Date.now();
    const own = call.deadline;
    if (own === undefined || own >= now + timeoutMs) {
      call.deadline = now + timeoutMs;
    } else {
      call.deadline = own;
      call.cutShort = own - now < countedMs;
    }
    return next(call);
  };
}
