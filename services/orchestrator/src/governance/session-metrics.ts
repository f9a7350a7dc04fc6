// The orchestrator's own metrics, declared in one place, in the registry the server exports.
import { declareIn } from "@loopguard/tool-sdk";
import { type Counter, Gauge, type Histogram, type Registry } from "prom-client";
import { LATE_SPEND_FATES } from "../session/moves.js";
import { LOW_CONFIDENCE, NOT_AS_ASKED, TOOL_NAMED_REASONS } from "../session/outcome.js";
import { SESSION_STATES, STOP_REASONS } from "../session/session-state.js";
import type { SessionStore } from "../store/session-store.js";

/**
 * The outcome and reason labels (reasonLabel's, session/outcome.ts) of the outcomes whose reasons
 * name no tool: a success, a stop short of the task (never by done: that is judged by what was
 * made), an effect not made as asked and an answer below the confidence threshold.
 */
const BOUNDED_OUTCOMES: readonly (readonly [outcome: string, reason: string])[] = [
  ["succeeded", ""],
  ...STOP_REASONS.filter((stop) => stop !== "done").map((stop) => ["not_done", stop] as const),
  ["partial", NOT_AS_ASKED],
  ["partial", LOW_CONFIDENCE],
];

/** `query`, run once for every caller that asks while a run is in flight. */
function inFlightOnce<T>(query: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined;
  return () => {
    running ??= query().finally(() => {
      running = undefined;
    });
    return running;
  };
}

/**
 * Gauges set at scrape time from one store query, each by `read` from its answer. A store that
 * cannot answer leaves them as they were: /metrics keeps answering, and
 * loopguard_store_errors_total says why they are stale.
 */
function storeGauges<T>(
  registers: Registry[],
  query: () => Promise<T | undefined>,
  gauges: Readonly<Record<string, readonly [help: string, read: (now: T) => number]>>,
): void {
  for (const [name, [help, read]] of Object.entries(gauges)) {
    new Gauge({
      name,
      help,
      registers,
      async collect() {
        const now = await query();
        if (now) this.set(read(now));
      },
    });
  }
}

export class SessionMetrics {
  readonly storeErrors: Counter<"operation">;
  readonly traceFileErrors: Counter;
  readonly leasesLost: Counter<"then">;
  readonly stops: Counter<"stop_reason">;
  readonly outcomes: Counter<"outcome" | "reason">;
  readonly effectsUnknown: Counter;
  readonly stepsPerSession: Histogram;
  readonly takeoversPerSession: Histogram;
  readonly toolResults: Counter<"tool" | "outcome" | "served_from">;
  readonly costMicros: Counter;
  readonly transitions: Counter<"to">;
  readonly contextAlarms: Counter;
  readonly promptTokens: Histogram;
  readonly contextCompression: Histogram;
  readonly modelCostMicros: Counter;
  readonly usageDisbelieved: Counter<"model">;
  readonly lateSpend: Counter<"fate">;

  #store: SessionStore | undefined;
  #now: () => number = Date.now;

  constructor(registry: Registry) {
    const registers = [registry];
    const declare = declareIn(registry);
    // Each query feeds two gauges, collected together by one scrape: they share its one run.
    const counts = inFlightOnce(async () => this.#store?.countByState().catch(() => undefined));
    // Like storeGauges', its counts stay as they were while the store cannot answer.
    new Gauge({
      name: "loopguard_sessions",
      help: "Sessions in the store by state.",
      labelNames: ["state"] as const,
      registers,
      async collect() {
        const now = await counts();
        if (now) for (const state of SESSION_STATES) this.set({ state }, now[state] ?? 0);
      },
    });
    storeGauges(registers, counts, {
      loopguard_approvals_waiting: ["Sessions waiting for a human's approval.", (now) => now.AWAITING_APPROVAL ?? 0],
    });
    this.storeErrors = declare.counter(
      "loopguard_store_errors_total",
      "Session store operations that failed because the database could not serve (busy, unreachable, timed out), by operation.",
      ["operation"],
    );
    this.traceFileErrors = declare.counter(
      "loopguard_trace_file_errors_total",
      "Step-trace JSONL file opens and writes that failed (the steps stay in the store; a new file is opened after a pause).",
    );
    this.leasesLost = declare.counter(
      "loopguard_session_leases_lost_total",
      "Sessions whose lease ran out while this replica ran them (a stall past the lease TTL), by what followed: then=stopped (the renewal found it gone: the run stops, whoever claims the session next goes on) or claimed_back (a claim of this replica took it again first: the run goes on).",
      ["then"],
    );
    this.stops = declare.counter("loopguard_session_stops_total", "Sessions ended, by stop reason.", ["stop_reason"]);
    this.outcomes = declare.counter(
      "loopguard_session_outcomes_total",
      "Sessions ended, by what the user got (succeeded, partial, not_done) and why when not succeeded.",
      ["outcome", "reason"],
    );
    this.effectsUnknown = declare.counter(
      "loopguard_session_effects_unknown_total",
      "Sessions that ended with an irreversible call sent and its outcome never settled (outcome reason effect_unknown): it may have been made, and its amount stays held against its entity's and customer's totals until someone checks the tool's records.",
    );
    const overdue = inFlightOnce(async () => this.#store?.overdue(this.#now()).catch(() => undefined));
    storeGauges(registers, overdue, {
      loopguard_approvals_overdue: [
        "Sessions still waiting for an approval whose expiry has passed (the sweep should have ended them).",
        (now) => now.approvals,
      ],
      loopguard_sessions_parked_near_deadline: [
        "Sessions parked for a tool with less than a fifth of their wall-clock budget left.",
        (now) => now.parkedNearDeadline,
      ],
    });
    this.stepsPerSession = declare.histogram(
      "loopguard_session_steps",
      "Policy steps a session took before it ended.",
      [1, 2, 3, 5, 8, 13, 20, 50],
    );
    this.takeoversPerSession = declare.histogram(
      "loopguard_session_takeovers",
      "Takeovers a session had when it ended: claims of its lease by another replica after the one running it let the lease run out (it crashed, was killed, or stalled past the lease). Counted by the replica that ends the session, so it shows replicas that died and could count nothing themselves.",
      [0, 1, 2, 3, 5, 10],
    );
    this.toolResults = declare.counter(
      "loopguard_session_tool_results_total",
      "Tool results observed by sessions, by tool, outcome (ok or error code) and where they came from.",
      ["tool", "outcome", "served_from"],
    );
    this.costMicros = declare.counter(
      "loopguard_session_cost_micros_total",
      "Money spent by sessions on tool calls, in micro-units.",
    );
    this.contextAlarms = declare.counter(
      "loopguard_session_context_alarms_total",
      "Model prompts that reached 80% of the model's context window (after compression).",
    );
    this.promptTokens = declare.histogram(
      "loopguard_model_prompt_tokens",
      "Tokens of each model prompt as sent (after compression), counted with the model's tokenizer.",
      [500, 1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000],
    );
    this.contextCompression = declare.histogram(
      "loopguard_session_context_compression_ratio",
      "Prompt tokens after compression over before, for prompts that were compressed (lower: more saved).",
      [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1],
    );
    this.modelCostMicros = declare.counter(
      "loopguard_model_cost_micros_total",
      "Money spent on model calls (price table x tokens), in micro-units.",
    );
    this.usageDisbelieved = declare.counter(
      "loopguard_model_usage_disbelieved_total",
      "Model calls whose endpoint reported under half the tokens the host counted (prompt or reply); the host's count was charged instead. By model.",
      ["model"],
    );
    this.lateSpend = declare.counter(
      "loopguard_session_late_spend_total",
      "Model calls and tool answers whose spend could not be written with their move: the session had moved on (a cancel, another replica's stop, a lost lease) or the store was out. By fate: charged (to the session, ended or run by another replica), store_failed (not charged: the store did not take it; also a host's live read whose own charge it did not take), carried (the store was out: charged when the session is read again, unless the write had committed) or reissued (a tool's price, paid when the session observes the call it sends again).",
      ["fate"],
    );
    this.transitions = declare.counter(
      "loopguard_session_transitions_total",
      "Session state transitions, by the state entered.",
      ["to"],
    );
    // The series that alerts count the first occurrence of, at 0 from the start: one that first
    // appears holding its count loses it to increase(), and SessionSpendNotCharged and
    // SessionLeasesLost would not fire on the first uncharged spend or lost lease.
    for (const fate of LATE_SPEND_FATES) this.lateSpend.inc({ fate }, 0);
    for (const then of ["stopped", "claimed_back"] as const) this.leasesLost.inc({ then }, 0);
    this.effectsUnknown.inc(0);
    // Likewise the stops and outcomes SessionStopReasonsHigh, SessionNoProgressHigh and
    // SessionOutcomesNotSucceededHigh count: else every replica, after each restart, loses the first
    // session it ends for each reason. Those that name a tool: knowTools.
    for (const stop_reason of STOP_REASONS) this.stops.inc({ stop_reason }, 0);
    for (const [outcome, reason] of BOUNDED_OUTCOMES) this.outcomes.inc({ outcome, reason }, 0);
  }

  /**
   * The series that name the orchestrator's tools (model-visible names), at 0 from the start as the
   * bounded ones are: each tool's outcome reasons (no_effect and effect_unknown only for an
   * irreversible one), and the degraded answers ToolFallbacksServedHigh counts. A reason naming
   * several tools, or a forwarded call's error code (call_failed), is made on first use.
   */
  knowTools(names: readonly string[], irreversible: (name: string) => boolean): void {
    for (const name of names) {
      this.toolResults.inc({ tool: name, outcome: "ok", served_from: "degraded" }, 0);
      for (const [reason, outcome] of Object.entries(TOOL_NAMED_REASONS)) {
        if (outcome === "not_done" && !irreversible(name)) continue;
        this.outcomes.inc({ outcome, reason: `${reason}: ${name}` }, 0);
      }
    }
  }

  /**
   * The store the session gauges count (opened after these metrics, so that it can count its errors here), and the
   * clock of the times it holds (see storeClock): a replica whose own clock runs ahead would count approvals overdue.
   */
  observe(store: SessionStore, now: () => number): void {
    this.#store = store;
    this.#now = now;
  }
}
