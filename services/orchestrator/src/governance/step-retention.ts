// Retention for the step rows in the session store: ended sessions' rows older than the window go,
// in batches (each its own short write, so sessions' transitions interleave with it), on one timer
// per process — no per-session timers. A live session's rows stay however old they are. Several
// replicas may run it at once (see SessionStore.pruneSteps); the JSONL trace files have their own
// rotation (trace-files.ts), which this does not touch.
import { declareIn, type Logger } from "@loopguard/tool-sdk";
import type { Counter, Gauge, Registry } from "prom-client";
import { Periodic } from "./periodic.js";
import type { SessionStore } from "../store/session-store.js";

const DAY_MS = 86_400_000;

export interface StepRetentionOptions {
  readonly store: Pick<SessionStore, "pruneSteps" | "oldestStepAt">;
  /** Step rows of ended sessions older than this many days go. */
  readonly days: number;
  /** How often a pass runs. */
  readonly intervalMs: number;
  /** Rows one delete takes at most. */
  readonly batch: number;
  readonly registry: Registry;
  readonly log: Logger;
  readonly now: () => number;
}

export class StepRetention extends Periodic<number> {
  readonly #deleted: Counter;
  readonly #lastRun: Gauge;
  readonly #oldestAge: Gauge;

  constructor(private readonly options: StepRetentionOptions) {
    super(options.intervalMs);
    const declare = declareIn(options.registry);
    this.#deleted = declare.counter(
      "loopguard_step_rows_deleted_total",
      "Step rows retention deleted (ended sessions' rows past ORCHESTRATOR_STEP_RETENTION_DAYS).",
    );
    this.#lastRun = declare.gauge(
      "loopguard_step_retention_last_run_timestamp_seconds",
      "When the last retention pass over the step rows finished (Unix seconds).",
    );
    this.#oldestAge = declare.gauge(
      "loopguard_step_oldest_row_age_seconds",
      "Age of the oldest step row kept, as of the last retention pass (0 when there is none).",
    );
  }

  /** One pass: deletes batches until one comes back short; returns the rows deleted. */
  protected async task(): Promise<number> {
    const { store, batch, log } = this.options;
    const before = this.options.now() - this.options.days * DAY_MS;
    let total = 0;
    try {
      for (;;) {
        const n = await store.pruneSteps(before, batch);
        total += n;
        this.#deleted.inc(n);
        if (n < batch || this.stopped) break;
        // Lets the sessions' own writes in between two batches.
        await new Promise((resolve) => setImmediate(resolve));
      }
      const oldest = await store.oldestStepAt();
      const now = this.options.now();
      this.#oldestAge.set(oldest === null ? 0 : Math.max(0, (now - oldest) / 1000));
      this.#lastRun.set(now / 1000);
      if (total > 0) log.info("step retention pass", { rows_deleted: total, retention_days: this.options.days });
    } catch (error) {
      // The next pass tries again; loopguard_store_errors_total counts an unavailable store.
      log.warn("step retention pass failed", {
        error_name: (error as Error).name,
        error_message: (error as Error).message,
        rows_deleted: total,
      });
    }
    return total;
  }
}
