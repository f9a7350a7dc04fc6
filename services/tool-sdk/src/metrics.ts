// Every metric a tool server exports, declared in one place with its unit and labels, in a
// registry the server owns. Names follow the standard gRPC server metrics
// (grpc_server_started_total, grpc_server_handled_total, grpc_server_handling_seconds).
import { collectDefaultMetrics, Registry } from "prom-client";
import { declareIn } from "./metric-declarations.js";

export class ServerMetrics {
  readonly registry = new Registry();
  readonly #declare = declareIn(this.registry);

  /** A counter of one tool's calls, by method and any further labels. */
  #methodCounter<L extends string = never>(name: string, help: string, more: readonly L[] = []) {
    return this.#declare.counter<"tool" | "grpc_method" | L>(name, help, ["tool", "grpc_method", ...more]);
  }

  /** RPCs started on the server, by method. */
  readonly started = this.#declare.counter("grpc_server_started_total", "Total number of RPCs started on the server.", [
    "grpc_type",
    "grpc_service",
    "grpc_method",
  ]);

  /** RPCs completed on the server, by method and status code name. */
  readonly handled = this.#declare.counter(
    "grpc_server_handled_total",
    "Total number of RPCs completed on the server, regardless of success or failure.",
    ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
  );

  /** Seconds from receiving a request to sending its status, by method and code. */
  readonly handlingSeconds = this.#declare.histogram(
    "grpc_server_handling_seconds",
    "Histogram of response latency (seconds) of gRPC calls handled by the server.",
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
  );

  /** Unary calls being handled right now. */
  readonly inFlight = this.#declare.gauge(
    "loopguard_tool_in_flight_calls",
    "Unary calls currently being handled by this tool server.",
    ["tool"],
  );

  /** Calls refused because the server was at its concurrency limit. */
  readonly shed = this.#methodCounter(
    "loopguard_tool_shed_total",
    "Unary calls refused with RESOURCE_EXHAUSTED because the concurrency limit was reached.",
  );

  /** Server streams open right now (not counted in loopguard_tool_in_flight_calls). */
  readonly openStreams = this.#declare.gauge(
    "loopguard_tool_open_streams",
    "Server streams currently open on this tool server.",
    ["tool"],
  );

  /** Streams refused because the server's or the caller's stream limit was reached. */
  readonly streamsRefused = this.#methodCounter(
    "loopguard_tool_streams_refused_total",
    "Streams refused with RESOURCE_EXHAUSTED (TOO_MANY_STREAMS), by the limit reached: server or caller.",
    ["limit"],
  );

  /** Requests refused undecoded because they were larger than their method accepts. */
  readonly tooLarge = this.#methodCounter(
    "loopguard_tool_requests_too_large_total",
    "Requests refused with INVALID_ARGUMENT (REQUEST_TOO_LARGE) before decoding, above their method's max_request_bytes.",
  );

  /** Responses withheld because they broke their contract. */
  readonly contractViolations = this.#methodCounter(
    "loopguard_tool_contract_violations_total",
    "Responses a handler produced that broke their contract and were replaced by INTERNAL.",
  );

  /** Faults injected for drills, by kind. */
  readonly faultsInjected = this.#methodCounter(
    "loopguard_tool_faults_injected_total",
    "Faults injected by the drill switch, by kind (latency, error, outage).",
    ["kind"],
  );

  /** 1 while the server accepts calls, 0 while it drains for shutdown. */
  readonly serving = this.#declare.gauge(
    "loopguard_tool_serving",
    "1 while the tool server accepts calls, 0 while draining.",
    ["tool"],
  );

  constructor(tool: string) {
    this.registry.setDefaultLabels({ tool_service: tool });
    collectDefaultMetrics({ register: this.registry });
  }
}
