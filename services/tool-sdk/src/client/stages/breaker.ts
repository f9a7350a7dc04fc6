// Circuit breakers of one tool (opossum), one per method, around each attempt: an open breaker
// refuses that method's calls with UNAVAILABLE and when it will let a probe through, while the
// tool's other methods still go out (a refund slowed by an order's lock must not refuse the reads
// the host checks with). Only the tool's own failures trip one: never a caller's mistake or cancel,
// a lost hedge race, an attempt never sent, or a timeout its caller forced.
import { status } from "@grpc/grpc-js";
import CircuitBreaker from "opossum";
import { CALLER_ERROR_CODES } from "../../errors.js";
import { answeredByTool, CallError, clientFailure } from "../call-error.js";
import type { ClientCall, ClientInterceptor } from "../chain.js";
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

/**
 * Whether an attempt's failure says the tool is unwell. A timeout does unless the caller's deadline
 * cut the call short (a healthy tool misses a 5 ms deadline too; chain.ts, cutShort); an attempt
 * that never went out (its caller gave up first), a cancel and a lost race say nothing of the tool.
 */
function countsAgainstTool(error: unknown, call: ClientCall | undefined): boolean {
  if (error instanceof LostRace) return false;
  if (!(error instanceof CallError)) return true;
  if (CALLER_ERROR_CODES.has(error.code)) return false;
  if (call === undefined) return true;
  return call.attempt.number > 0 && !(error.code === status.DEADLINE_EXCEEDED && call.cutShort);
}

/** An answer of the tool that its caller gets as a failure: a success to opossum, thrown after it. */
class Answered {
  constructor(readonly error: unknown) {}
}

/**
 * The outcomes that say how the tool is, over a rolling window of ten buckets. Written here because
 * opossum counts every fire in its error rate's denominator and a filtered error as a success: the
 * calls that say nothing of the tool (cut short by their caller, cancelled, lost races) would dilute
 * the rate, and one of them as a half-open probe would close the breaker of a tool still down.
 */
class ToolOutcomes {
  readonly #bucketMs: number;
  readonly #buckets: { at: number; answered: number; failed: number }[] = [];

  constructor(windowMs: number) {
    this.#bucketMs = windowMs / 10;
  }

  /** Records one outcome. */
  record(failed: boolean, now = performance.now()): void {
    const at = Math.floor(now / this.#bucketMs);
    while (this.#buckets.length > 0 && this.#buckets[0]!.at <= at - 10) this.#buckets.shift();
    let bucket = this.#buckets.at(-1);
    if (bucket?.at !== at) {
      bucket = { at, answered: 0, failed: 0 };
      this.#buckets.push(bucket);
    }
    if (failed) bucket.failed += 1;
    else bucket.answered += 1;
  }

  /** The failures' share of the window's outcomes, in percent, and how many outcomes there are. */
  failures(): { percent: number; outcomes: number } {
    let outcomes = 0;
    let failures = 0;
    for (const b of this.#buckets) {
      outcomes += b.answered + b.failed;
      failures += b.failed;
    }
    return { percent: outcomes === 0 ? 0 : (failures / outcomes) * 100, outcomes };
  }

  clear(): void {
    this.#buckets.length = 0;
  }
}

/**
 * One method's breaker: opossum keeps its states, timers and the one probe of half-open; it opens on
 * the share of the tool's own failures among the outcomes that say how the tool is (ToolOutcomes).
 */
class MethodBreaker {
  readonly #breaker: CircuitBreaker<[() => Promise<unknown>, ClientCall?], unknown>;
  readonly #resetTimeoutMs: number;
  readonly #outcomes: ToolOutcomes;
  readonly #thresholdPercent: number;
  readonly #volume: number;
  /** When the breaker last opened; with its reset timeout, when it will let a probe through. */
  #openedAt = 0;

  constructor(overrides: BreakerOverrides, changed: () => void) {
    this.#resetTimeoutMs = overrides.resetTimeoutMs ?? 5_000;
    this.#thresholdPercent = overrides.errorThresholdPercentage ?? 50;
    this.#volume = overrides.volumeThreshold ?? 5;
    this.#outcomes = new ToolOutcomes(overrides.rollingWindowMs ?? 10_000);
    this.#breaker = new CircuitBreaker((attempt: () => Promise<unknown>) => attempt(), {
      // Deadlines are gRPC's job; the breaker only counts outcomes.
      timeout: false,
      // Never by opossum's own rate (see ToolOutcomes). Every failure but the tool's own answers
      // reaches opossum unfiltered: in half-open a probe that got no answer opens it again, whatever
      // the reason, and an answer closes it, a refusal of the request included (fire, Answered).
      errorThresholdPercentage: 100,
      resetTimeout: this.#resetTimeoutMs,
    });
    this.#breaker.on("open", () => {
      this.#openedAt = Date.now();
      changed();
    });
    this.#breaker.on("halfOpen", changed);
    this.#breaker.on("close", () => {
      // A tool that answered its probe starts afresh: the failures before do not count twice.
      this.#outcomes.clear();
      changed();
    });
  }

  get state(): BreakerState {
    return this.#breaker.opened ? "open" : this.#breaker.halfOpen ? "half-open" : "closed";
  }

  get retryAt(): number | undefined {
    return this.#breaker.opened ? this.#openedAt + this.#resetTimeoutMs : undefined;
  }

  fire(attempt: () => Promise<unknown>, call?: ClientCall): Promise<unknown> {
    return this.#breaker
      .fire(
        () =>
          attempt().then(
            (answer) => {
              this.#outcomes.record(false);
              return answer;
            },
            (error: unknown) => {
              if (answeredByTool(error)) {
                this.#outcomes.record(false);
                return new Answered(error);
              }
              this.#judge(error, call);
              throw error;
            },
          ),
        call,
      )
      .then((result) => {
        if (result instanceof Answered) throw result.error;
        return result;
      });
  }

  /** A failed attempt, before opossum hears of it: counted if it says how the tool is. */
  #judge(error: unknown, call: ClientCall | undefined): void {
    if (!countsAgainstTool(error, call)) return;
    this.#outcomes.record(true);
    const { percent, outcomes } = this.#outcomes.failures();
    if (this.#breaker.closed && outcomes >= this.#volume && percent > this.#thresholdPercent) this.#breaker.open();
  }

  shutdown(): void {
    this.#breaker.shutdown();
  }
}

const worst = (a: BreakerState, b: BreakerState): BreakerState =>
  BREAKER_STATE_VALUE[a] >= BREAKER_STATE_VALUE[b] ? a : b;

/**
 * The breakers of one tool's methods. The tool's state is its worst method's (open if any is):
 * what `loopguard_tool_breaker_state{tool}`, its transitions and ToolBreakerOpen have always read.
 */
export class ToolBreaker {
  readonly #methods = new Map<string, MethodBreaker>();
  readonly #listeners = new Set<(state: BreakerState) => void>();
  #state: BreakerState = "closed";

  constructor(
    private readonly tool: string,
    private readonly overrides: BreakerOverrides,
    private readonly metrics: ClientMetrics,
  ) {
    metrics.breakerState.set({ tool }, 0);
    // Every transition's series at 0 from the start: one that first appears holding its count loses
    // it to increase(), and the alert on a breaker that opened would miss its first opening.
    for (const state of ["open", "half-open", "closed"] as const) metrics.breakerTransitions.inc({ tool, state }, 0);
  }

  /** The tool's state: its worst method's. */
  get state(): BreakerState {
    return this.#state;
  }

  /** While some method's breaker is open: the first time one of them lets a probe through (epoch ms); else undefined. */
  get retryAt(): number | undefined {
    const times = [...this.#methods.values()].flatMap((m) => (m.retryAt === undefined ? [] : [m.retryAt]));
    return times.length === 0 ? undefined : Math.min(...times);
  }

  /** One method's state (by its local name, e.g. "getOrder"). */
  stateOf(method: string): BreakerState {
    return this.#methods.get(method)?.state ?? "closed";
  }

  /** While the method's breaker is open: when it will let a probe through (epoch ms); else undefined. */
  retryAtOf(method: string): number | undefined {
    return this.#methods.get(method)?.retryAt;
  }

  /** Calls `listener` on every transition of the tool's state; returns the unsubscribe function. */
  onChange(listener: (state: BreakerState) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The breaker of one method (by its local name), made on first use. */
  of(method: string): MethodBreaker {
    let breaker = this.#methods.get(method);
    if (!breaker) {
      breaker = new MethodBreaker(this.overrides, () => this.#changed());
      this.#methods.set(method, breaker);
    }
    return breaker;
  }

  shutdown(): void {
    for (const breaker of this.#methods.values()) breaker.shutdown();
  }

  #changed(): void {
    const state = [...this.#methods.values()].map((m) => m.state).reduce(worst, "closed");
    if (state === this.#state) return;
    this.#state = state;
    this.metrics.breakerState.set({ tool: this.tool }, BREAKER_STATE_VALUE[state]);
    this.metrics.breakerTransitions.inc({ tool: this.tool, state });
    for (const listener of this.#listeners) listener(state);
  }
}

/** Each attempt through the breaker of its own method. */
export function breakerStage(breakers: ToolBreaker): ClientInterceptor {
  return (next) => (call) => {
    const breaker = breakers.of(call.target.method.localName);
    return breaker
      .fire(
        () =>
          next(call).catch((thrown: unknown) => {
            throw call.attempt.lost ? new LostRace(`${call.target.tool}: another attempt answered first`) : thrown;
          }),
        call,
      )
      .catch((thrown: unknown) => {
        if (thrown instanceof CallError || thrown instanceof LostRace) throw thrown;
        if ((thrown as { code?: string }).code === "EOPENBREAKER") {
          // Like a server's RetryInfo: when the breaker will let a probe through.
          const retryAfterMs = Math.max(0, (breaker.retryAt ?? Date.now()) - Date.now());
          throw clientFailure(call, status.UNAVAILABLE, "BREAKER_OPEN", "circuit breaker is open", retryAfterMs);
        }
        throw clientFailure(call, status.INTERNAL, "INTERNAL_ERROR", (thrown as Error).message);
      });
  };
}
