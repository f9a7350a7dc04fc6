// What a hedge needs to know: when to send one (a method's observed p95) and which replicas have
// been losing to hedges (so first attempts stop going there, and hedges stay a small share of calls).

export interface HedgeOverrides {
  /** false: never hedge, whatever the contract says. */
  readonly enabled?: boolean;
  /** Smallest delay before a hedge, however fast the method has been (ms). */
  readonly minDelayMs?: number;
  /** Delay until the method has answered `minSamples` times; default the contract's SLA p95 target. */
  readonly fallbackDelayMs?: number;
  /** Answers a method needs before its observed p95 is used. */
  readonly minSamples?: number;
  /** First attempts in a row not answered within the hedge delay, after which a replica is avoided. */
  readonly lossesToAvoid?: number;
  /** How long a replica found slow is avoided by first attempts (ms). */
  readonly avoidForMs?: number;
}

const WINDOW = 256;
/** The p95 is sorted again after this many new samples, not on every call. */
const REFRESH_EVERY = 16;

/**
 * A method's p95 over its last WINDOW answers (each attempt's own time, so a hedge that won does
 * not count the delay it waited, and cancelled attempts count nothing). Written by hand: prom-client's
 * Summary computes the same over a time window but only asynchronously, and a call decides its
 * hedge delay as it starts.
 */
export class LatencyWindow {
  readonly #samples: number[] = [];
  #next = 0;
  #sinceRefresh = 0;
  #p95: number | undefined;

  get count(): number {
    return this.#samples.length;
  }

  add(ms: number): void {
    if (this.#samples.length < WINDOW) this.#samples.push(ms);
    else this.#samples[this.#next] = ms;
    this.#next = (this.#next + 1) % WINDOW;
    if (++this.#sinceRefresh >= REFRESH_EVERY) this.#p95 = undefined;
  }

  p95(): number | undefined {
    if (this.#samples.length === 0) return undefined;
    if (this.#p95 === undefined) {
      const sorted = [...this.#samples].sort((a, b) => a - b);
      this.#p95 = sorted[Math.min(sorted.length - 1, Math.ceil(0.95 * sorted.length) - 1)];
      this.#sinceRefresh = 0;
    }
    return this.#p95;
  }
}

/**
 * Replicas whose first attempts keep coming late (not answered within the hedge delay, whether a
 * hedge then won or the budget allowed none): a slow replica, which round robin would otherwise
 * keep sending a third of the calls, each needing a hedge (more than the retry budget gives, so
 * most would simply wait). After `lossesToAvoid` late answers in a row a replica is avoided by first
 * attempts for `avoidForMs` (it still takes them when nothing else is ready), then tried again. At
 * most half the replicas seen are avoided at once (at that cap the one avoided longest ago makes way
 * for a newly late one). A healthy replica is late 5 % of the time (the
 * delay is the p95), so three in a row is rare.
 */
export class SlowReplicas {
  readonly #losses = new Map<string, number>();
  readonly #avoidedUntil = new Map<string, number>();
  readonly #seen = new Set<string>();

  constructor(
    private readonly lossesToAvoid: number,
    private readonly avoidForMs: number,
  ) {}

  /** Replicas that have answered this client, by address. */
  get seen(): ReadonlySet<string> {
    return this.#seen;
  }

  answered(address: string): void {
    this.#seen.add(address);
    this.#losses.delete(address);
  }

  late(address: string, now: number): void {
    this.#seen.add(address);
    const losses = (this.#losses.get(address) ?? 0) + 1;
    this.#losses.set(address, losses);
    const avoided = this.avoided(now);
    if (losses < this.lossesToAvoid || avoided.includes(address)) return;
    if (avoided.length + 1 > Math.floor(this.#seen.size / 2)) {
      // At the cap, the replica avoided longest ago makes way: it may have been late for a passing
      // reason (a cold start), and this one is late now.
      const oldest = [...this.#avoidedUntil.entries()].sort((a, b) => a[1] - b[1])[0];
      if (!oldest) return;
      this.#avoidedUntil.delete(oldest[0]);
    }
    this.#avoidedUntil.set(address, now + this.avoidForMs);
    this.#losses.delete(address);
  }

  avoided(now: number): string[] {
    const list: string[] = [];
    for (const [address, until] of this.#avoidedUntil) {
      if (until > now) list.push(address);
      else this.#avoidedUntil.delete(address);
    }
    return list;
  }
}
