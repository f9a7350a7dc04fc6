// Every metric a tool server exports, declared in one place with its unit and labels, in a
// registry the server owns. Names follow the standard gRPC server metrics
// (grpc_server_started_total, grpc_server_handled_total, grpc_server_handling_seconds).
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";

export class ServerMetrics {
  readonly registry = new Registry();

  /** RPCs started on the server, by method. */
  readonly started = new Counter({
    name: "grpc_server_started_total",
    help: "Total number of RPCs started on the server.",
    labelNames: ["grpc_type", "grpc_service", "grpc_method"] as const,
    registers: [this.registry],
  });

  /** RPCs completed on the server, by method and status code name. */
  readonly handled = new Counter({
    name: "grpc_server_handled_total",
    help: "Total number of RPCs completed on the server, regardless of success or failure.",
    labelNames: ["grpc_type", "grpc_service", "grpc_method", "grpc_code"] as const,
    registers: [this.registry],
  });

  /** Seconds from receiving a request to sending its status, by method and code. */
  readonly handlingSeconds = new Histogram({
    name: "grpc_server_handling_seconds",
    help: "Histogram of response latency (seconds) of gRPC calls handled by the server.",
    labelNames: ["grpc_type", "grpc_service", "grpc_method", "grpc_code"] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });

  /** Unary calls being handled right now. */
  readonly inFlight = new Gauge({
    name: "loopguard_tool_in_flight_calls",
    help: "Unary calls currently being handled by this tool server.",
    labelNames: ["tool"] as const,
    registers: [this.registry],
  });

  /** Calls refused because the server was at its concurrency limit. */
  readonly shed = new Counter({
    name: "loopguard_tool_shed_total",
    help: "Unary calls refused with RESOURCE_EXHAUSTED because the concurrency limit was reached.",
    labelNames: ["tool", "grpc_method"] as const,
    registers: [this.registry],
  });

  /** Server streams open right now (not counted in loopguard_tool_in_flight_calls). */
  readonly openStreams = new Gauge({
    name: "loopguard_tool_open_streams",
    help: "Server streams currently open on this tool server.",
    labelNames: ["tool"] as const,
    registers: [this.registry],
  });

  /** Streams refused because the server's or the caller's stream limit was reached. */
  readonly streamsRefused = new Counter({
    name: "loopguard_tool_streams_refused_total",
    help: "Streams refused with RESOURCE_EXHAUSTED (TOO_MANY_STREAMS), by the limit reached: server or caller.",
    labelNames: ["tool", "grpc_method", "limit"] as const,
    registers: [this.registry],
  });

  /** Requests refused undecoded because they were larger than their method accepts. */
  readonly tooLarge = new Counter({
    name: "loopguard_tool_requests_too_large_total",
    help: "Requests refused with INVALID_ARGUMENT (REQUEST_TOO_LARGE) before decoding, above their method's max_request_bytes.",
    labelNames: ["tool", "grpc_method"] as const,
    registers: [this.registry],
  });

  /** Responses withheld because they broke their contract. */
  readonly contractViolations = new Counter({
    name: "loopguard_tool_contract_violations_total",
    help: "Responses a handler produced that broke their contract and were replaced by INTERNAL.",
    labelNames: ["tool", "grpc_method"] as const,
    registers: [this.registry],
  });

  /** Faults injected for drills, by kind. */
  readonly faultsInjected = new Counter({
    name: "loopguard_tool_faults_injected_total",
    help: "Faults injected by the drill switch, by kind (latency, error, outage).",
    labelNames: ["tool", "grpc_method", "kind"] as const,
    registers: [this.registry],
  });

  /** 1 while the server accepts calls, 0 while it drains for shutdown. */
  readonly serving = new Gauge({
    name: "loopguard_tool_serving",
    help: "1 while the tool server accepts calls, 0 while draining.",
    labelNames: ["tool"] as const,
    registers: [this.registry],
  });

  constructor(tool: string) {
    this.registry.setDefaultLabels({ tool_service: tool });
    collectDefaultMetrics({ register: this.registry });
  }
}
