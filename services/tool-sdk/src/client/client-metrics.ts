// Metrics of the calling side, declared in one place: the standard gRPC client twins plus
// loopguard's per-tool outcomes, retries, hedges and breaker state. One instance per process, shared
// by every toolClient, registered in a registry the caller owns.
import type { Counter, Gauge, Histogram, Registry } from "prom-client";
import { declareIn } from "../metric-declarations.js";

export const BREAKER_STATE_VALUE = { closed: 0, "half-open": 1, open: 2 } as const;

export class ClientMetrics {
  readonly handled: Counter<"grpc_type" | "grpc_service" | "grpc_method" | "grpc_code">;
  readonly handlingSeconds: Histogram<"grpc_type" | "grpc_service" | "grpc_method" | "grpc_code">;
  /**
   * One per call, by outcome: ok, error, fallback_cache, fallback_degraded, breaker_rejected, bulkhead_rejected,
   * client_invalid, answer_too_large. Each method's ok and the fallbacks its contract serves in an outage are
   * at 0 from its client's start (callMetricsStage), for the alerts' increase() to count their first calls.
   */
  readonly calls: Counter<"tool" | "method" | "outcome" | "grpc_code">;
  readonly retries: Counter<"tool" | "method">;
  readonly hedges: Counter<"tool" | "method">;
  readonly hedgesWon: Counter<"tool" | "method">;
  readonly hedgeLosersCancelled: Counter<"tool" | "method">;
  /** The tool's worst method's breaker: 0 closed, 1 half-open, 2 open. */
  readonly breakerState: Gauge<"tool">;
  readonly breakerTransitions: Counter<"tool" | "state">;

  constructor(registry: Registry) {
    const declare = declareIn(registry);
    this.handled = declare.counter(
      "grpc_client_handled_total",
      "Total number of RPC attempts completed by the client, regardless of success or failure.",
      ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
    );
    this.handlingSeconds = declare.histogram(
      "grpc_client_handling_seconds",
      "Histogram of response latency (seconds) of RPC attempts until the client got the status.",
      [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
    );
    this.calls = declare.counter(
      "loopguard_tool_client_calls_total",
      "Tool calls by outcome (ok, error, fallback_cache, fallback_degraded, breaker_rejected, bulkhead_rejected, client_invalid, answer_too_large).",
      ["tool", "method", "outcome", "grpc_code"],
    );
    const perMethod = (name: string, help: string) => declare.counter(name, help, ["tool", "method"]);
    this.retries = perMethod("loopguard_tool_client_retries_total", "Retry attempts sent after a retryable failure.");
    this.hedges = perMethod(
      "loopguard_tool_client_hedges_total",
      "Hedges sent: a second attempt of a hedged read to another replica after the hedge delay.",
    );
    this.hedgesWon = perMethod(
      "loopguard_tool_client_hedges_won_total",
      "Calls whose answer came from a hedge rather than the attempt it raced.",
    );
    this.hedgeLosersCancelled = perMethod(
      "loopguard_tool_client_hedge_losers_cancelled_total",
      "Attempts cancelled because another attempt of the same call answered first.",
    );
    this.breakerState = declare.gauge(
      "loopguard_tool_breaker_state",
      "Circuit breaker state per tool, its worst method's: 0 closed, 1 half-open, 2 open.",
      ["tool"],
    );
    this.breakerTransitions = declare.counter(
      "loopguard_tool_breaker_transitions_total",
      "Changes of a tool's circuit breaker state (its worst method's), by the state entered.",
      ["tool", "state"],
    );
  }
}
