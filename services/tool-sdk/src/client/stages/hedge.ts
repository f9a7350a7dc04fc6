// The hedging slot: each attempt of a call gets its own route here. For a hedged method, when nothing
// has answered after the hedge delay (the observed p95), a hedge goes to a replica none of the racing
// attempts uses; the first answer wins and the others are cancelled.
import type { CallError } from "../call-error.js";
import { refusedBeforeHandling } from "../call-error.js";
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

const peersOf = (racing: readonly Attempt[]) => racing.flatMap((a) => (a.call ? [a.call.getPeer()] : []));

/**
 * One attempt, and for a hedged method up to its hedges: each within the call's attempts and with a
 * retry-budget token from the bucket's upper half (RetryBudget.tryHedge). A failure ends the race
 * only once no attempt is left in flight (a retry then follows as usual, so a failed first attempt
 * is retried, not hedged as well).
 */
export function hedgeStage(slot: HedgeSlot, parts: HedgeParts): ClientInterceptor {
  const { slow, budget, metrics } = parts;
  return (next) => (call) => {
    const { sent, outcome } = call;
    const labels = { tool: call.target.tool, method: call.target.method.name };
    const racing: Attempt[] = [];
    let timer: NodeJS.Timeout | undefined;
    const delayMs = slot.maxHedges > 0 ? hedgeDelayMs(slot, parts.overrides) : Number.POSITIVE_INFINITY;
    return new Promise((resolve, reject) => {
      let settled = false;
      const launch = (hedge: boolean) => {
        // A retry goes to another replica than the attempts that failed, when one is ready (as
        // Envoy's previous-hosts retry predicate): a replica that just died fails it again.
        const preferNot = [...slow.avoided(Date.now()), ...sent.failedPeers];
        const attempt = newAttempt(hedge, hedge ? peersOf(racing) : [], preferNot);
        racing.push(attempt);
        next({ ...call, attempt }).then(
          (response) => {
            const peer = attempt.call?.getPeer();
            const elapsedMs = performance.now() - attempt.sentAt;
            slot.latency.add(elapsedMs);
            if (peer !== undefined) {
              if (!attempt.hedge && elapsedMs > delayMs) slow.late(peer, Date.now());
              else slow.answered(peer);
            }
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            for (const other of racing) {
              if (other === attempt || !other.pending) continue;
              other.lost = true;
              other.call?.cancel();
              metrics.hedgeLosersCancelled.inc(labels);
              if (attempt.hedge && !other.hedge && other.call) slow.late(other.call.getPeer(), Date.now());
            }
            if (attempt.hedge) metrics.hedgesWon.inc(labels);
            outcome.winner = attempt.number;
            resolve(response);
          },
          (thrown: unknown) => {
            attempt.pending = false;
            // A loser cancelled after another attempt won is not a failed replica.
            if (settled) return;
            const peer = attempt.call?.getPeer();
            if (peer !== undefined) sent.failedPeers.push(peer);
            const failure = thrown as CallError;
            if (!refusedBeforeHandling(failure)) sent.mayHaveActed = true;
            if (racing.some((a) => a.pending)) return;
            settled = true;
            clearTimeout(timer);
            reject(failure);
          },
        );
        if (sent.hedges < slot.maxHedges) timer = setTimeout(hedgeIfStillWaiting, delayMs);
      };
      const hedgeIfStillWaiting = () => {
        const deadline = call.deadline ?? Number.POSITIVE_INFINITY;
        if (settled || call.options.signal?.aborted || sent.attempts >= sent.maxAttempts || Date.now() >= deadline)
          return;
        // Another replica must have answered this client before: with one address, a hedge would queue behind the same slow server.
        const inUse = new Set(peersOf(racing));
        if (![...slow.seen].some((address) => !inUse.has(address))) return;
        if (!budget.tryHedge()) return;
        sent.hedges++;
        outcome.hedged = true;
        metrics.hedges.inc(labels);
        launch(true);
      };
      launch(false);
    });
  };
}
