// At most so many calls of a tool in flight, so many more queued; beyond that RESOURCE_EXHAUSTED.
// A queued call waits no longer than its caller does: its caller's deadline or cancel takes it out
// of the queue at once, with nothing sent (the SLA deadline starts only when it leaves the queue).
import { status } from "@grpc/grpc-js";
import type { Admit, Bulkhead } from "../bulkhead.js";
import { type CallError, clientFailure } from "../call-error.js";
import type { ClientCall, ClientInterceptor } from "../chain.js";
import { MAX_TIMER_MS } from "../../timers.js";

// Before the retries: nothing of the call was sent yet (attempts 0).
const refused = (call: ClientCall, code: status, reason: string, why: string) =>
  clientFailure(call, code, reason, `${why} (${call.target.method.name})`);
const full = (call: ClientCall) =>
  refused(call, status.RESOURCE_EXHAUSTED, "BULKHEAD_FULL", "too many calls in flight");
const deadlinePassed = (call: ClientCall) =>
  refused(call, status.DEADLINE_EXCEEDED, "DEADLINE_PASSED", "the caller's deadline passed while waiting for a slot");
const cancelled = (call: ClientCall) =>
  refused(call, status.CANCELLED, "CALL_CANCELLED", "the caller cancelled while waiting for a slot");

/** Resolves when the call holds a slot; rejects when the queue is full or its caller stops waiting. */
function waitForSlot(bulkhead: Bulkhead, call: ClientCall): Promise<void> {
  const { signal } = call.options;
  const { deadline } = call;
  if (signal?.aborted) return Promise.reject(cancelled(call));
  if (deadline !== undefined && deadline <= Date.now()) return Promise.reject(deadlinePassed(call));
  return new Promise((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const stopWatching = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    };
    const admit: Admit = () => {
      stopWatching();
      resolve();
    };
    const giveUp = (error: CallError) => {
      // Already admitted (the slot was handed over in the same turn): the call goes ahead.
      if (!bulkhead.leaveQueue(admit)) return;
      stopWatching();
      reject(error);
    };
    const onAbort = () => giveUp(cancelled(call));
    if (!bulkhead.enqueue(admit)) {
      reject(full(call));
      return;
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    const waitMs = deadline === undefined ? Number.POSITIVE_INFINITY : deadline - Date.now();
    // A deadline further off than a timer can wait (about 24 days) is not timed.
    if (waitMs <= MAX_TIMER_MS) timer = setTimeout(() => giveUp(deadlinePassed(call)), waitMs);
  });
}

export function bulkheadStage(bulkhead: Bulkhead): ClientInterceptor {
  const run = async (next: (call: ClientCall) => Promise<unknown>, call: ClientCall) => {
    try {
      return await next(call);
    } finally {
      bulkhead.leave();
    }
  };
  return (next) => (call) =>
    bulkhead.tryEnter() ? run(next, call) : waitForSlot(bulkhead, call).then(() => run(next, call));
}
