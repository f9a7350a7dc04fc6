// The hedging slot: each attempt of a call gets its own route here. For a hedged method, when nothing
// has answered after the hedge delay (the observed p95), a hedge goes to a replica none of the racing
// attempts uses (as the balancer reports them); the first answer wins and the others are cancelled.
import { status } from "@grpc/grpc-js";
import { watchPick } from "../avoiding-round-robin.js";
import { answeredByTool, CallError, refusedBeforeHandling } from "../call-error.js";
import { type Attempt, type ClientInterceptor, newAttempt } from "../chain.js";
import type { ClientMetrics } from "../client-metrics.js";
import type { HedgeOverrides, LatencyWindow, SlowReplicas } from "../hedge.js";
import type { RetryBudget } from "../retry.js";

export interface HedgeSlot {
  /** Hedges one call may send (0: the method is not hedged). */
  readonly maxHedges: number;
  /** The contract's fixed hedge delay; 0 means the observed p95. */
  readonly fixedDelayMs: number;
  /** The contract's SLA p95 target: the delay until the method has answered often enough. */
  readonly slaP95Ms: number;
  /** The method's recent attempt latencies, for the hedge delay. */
  readonly latency: LatencyWindow;
}

export interface HedgeParts {
  readonly overrides: HedgeOverrides;
  readonly slow: SlowReplicas;
  readonly budget: RetryBudget;
  readonly metrics: ClientMetrics;
}

/** How long an attempt of a hedged method may go unanswered before a hedge is sent. */
export function hedgeDelayMs(slot: HedgeSlot, overrides: HedgeOverrides): number {
  if (slot.fixedDelayMs > 0) return slot.fixedDelayMs;
  const p95 = slot.latency.count >= (overrides.minSamples ?? 20) ? slot.latency.p95() : undefined;
  if (p95 === undefined) return overrides.fallbackDelayMs ?? slot.slaP95Ms;
  return Math.max(overrides.minDelayMs ?? 5, p95);
}

/** The replicas the racing attempts were started on; undefined while one of them is not known yet. */
function addressesOf(racing: readonly Attempt[]): string[] | undefined {
  const addresses = racing.flatMap((a) => (a.address === undefined ? [] : [a.address]));
  return racing.some((a) => a.pending && a.address === undefined) ? undefined : addresses;
}

/**
 * How much a failure that does not end the race tells its caller: a replica's own word (its code,
 * reason, RetryInfo) over a timeout, which says only that no answer came; an attempt that never
 * reached a replica (a hedge with nowhere else to go) least.
 */
function weight(attempt: Attempt, failure: CallError): number {
  if (attempt.address === undefined) return 0;
  return failure.code === status.DEADLINE_EXCEEDED ? 1 : 2;
}

/**
 * One attempt, and for a hedged method up to its hedges: each within the call's attempts and with a
 * retry-budget token from the bucket's upper half (RetryBudget.tryHedge), each to another replica
 * than the attempts it races. The first answer the tool gives ends the race, the others cancelled: a
 * success, or a refusal any replica would give (answeredByTool: NOT_FOUND, INVALID_ARGUMENT, …). A
 * failure that passes ends it only once no attempt is left in flight, then with the most telling of
 * the failures (a retry then follows as usual, so a failed first attempt is retried, not hedged as well).
 */
export function hedgeStage(slot: HedgeSlot, parts: HedgeParts): ClientInterceptor {
  const { slow, budget, metrics } = parts;
  return (next) => (call) => {
    const { sent, outcome } = call;
    const labels = { tool: call.target.tool, method: call.target.method.name };
    const racing: Attempt[] = [];
    let timer: NodeJS.Timeout | undefined;
    let failed: { attempt: Attempt; failure: CallError } | undefined;
    /** The replicas the channel has ready, as the balancer tells with an attempt's start. */
    let readyNow: (() => readonly string[]) | undefined;
    const delayMs = slot.maxHedges > 0 ? hedgeDelayMs(slot, parts.overrides) : Number.POSITIVE_INFINITY;
    /** The race's failure names every attempt sent, whichever attempt failed so. */
    const counted = (failure: CallError) =>
      failure instanceof CallError ? failure.withAttempts(sent.attempts) : failure;
    return new Promise((resolve, reject) => {
      let settled = false;
      /** An answer of `attempt`'s replica: on time, or late (a first attempt past the hedge delay). */
      const answered = (attempt: Attempt) => {
        if (attempt.address === undefined) return;
        if (!attempt.hedge && performance.now() - attempt.sentAt > delayMs) slow.late(attempt.address, Date.now());
        else slow.answered(attempt.address);
      };
      /** `winner` answered first: the race is over, the other attempts cancelled. */
      const settle = (winner: Attempt) => {
        settled = true;
        clearTimeout(timer);
        for (const other of racing) {
          if (other === winner || !other.pending) continue;
          other.lost = true;
          other.call?.cancel();
          metrics.hedgeLosersCancelled.inc(labels);
          if (winner.hedge && !other.hedge && other.address !== undefined) slow.late(other.address, Date.now());
        }
        if (winner.hedge) metrics.hedgesWon.inc(labels);
      };
      const launch = (hedge: boolean, avoid: readonly string[]) => {
        // A retry goes to another replica than the attempts that failed, when one is ready (as
        // Envoy's previous-hosts retry predicate): a replica that just died fails it again.
        const preferNot = [...slow.avoided(Date.now()), ...sent.failedPeers];
        const attempt = newAttempt(hedge, avoid, preferNot);
        const watch = watchPick((address, ready) => {
          attempt.address = address;
          readyNow = ready;
        });
        attempt.watch = watch.id;
        racing.push(attempt);
        next({ ...call, attempt }).then(
          (response) => {
            watch.stop();
            slot.latency.add(performance.now() - attempt.sentAt);
            answered(attempt);
            if (settled) return;
            settle(attempt);
            outcome.winner = attempt.number;
            resolve(response);
          },
          (thrown: unknown) => {
            watch.stop();
            attempt.pending = false;
            // A loser cancelled after another attempt won is not a failed replica.
            if (settled) return;
            const failure = thrown as CallError;
            if (!refusedBeforeHandling(failure)) sent.mayHaveActed = true;
            if (answeredByTool(failure)) {
              answered(attempt);
              settle(attempt);
              reject(counted(failure));
              return;
            }
            if (attempt.address !== undefined) sent.failedPeers.push(attempt.address);
            if (!failed || weight(attempt, failure) >= weight(failed.attempt, failed.failure))
              failed = { attempt, failure };
            if (racing.some((a) => a.pending)) return;
            settled = true;
            clearTimeout(timer);
            reject(counted(failed.failure));
          },
        );
        if (sent.hedges < slot.maxHedges) timer = setTimeout(hedgeIfStillWaiting, delayMs);
      };
      const hedgeIfStillWaiting = () => {
        const deadline = call.deadline ?? Number.POSITIVE_INFINITY;
        if (settled || call.options.signal?.aborted || sent.attempts >= sent.maxAttempts || Date.now() >= deadline)
          return;
        // Where the racing attempts went must be known (the balancer tells once it starts one), and
        // another replica must have answered this client before and be ready (connected) now: with
        // one, a hedge would queue behind the same slow server; with the other down, it goes nowhere.
        const inUse = addressesOf(racing);
        const elsewhere = (address: string) => !inUse?.includes(address);
        if (inUse === undefined || ![...slow.seen].some(elsewhere)) return;
        if (readyNow && !readyNow().some(elsewhere)) return;
        if (!budget.tryHedge()) return;
        sent.hedges++;
        outcome.hedged = true;
        metrics.hedges.inc(labels);
        launch(true, inUse);
      };
      launch(false, []);
    });
  };
}
