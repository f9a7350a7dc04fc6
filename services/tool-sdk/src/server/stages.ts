// The stages every call of a tool goes through, one interceptor each (see interceptor.ts for the
// shape and serve.ts for their order).
import { setTimeout as sleep } from "node:timers/promises";
import {
  create,
  type DescMessage,
  type DescMethod,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { SpanStatusCode } from "@opentelemetry/api";
import type { Caller } from "../auth.js";
import { latencyObjectiveMs } from "../contract.js";
import { INTERNAL_MESSAGE, status, ToolError } from "../errors.js";
import { type FaultDecision, type FaultSwitch, NO_FAULT } from "../faults.js";
import type { Logger } from "../logger.js";
import type { ServerMetrics } from "../metrics.js";
import { context, startServerSpan } from "../tracing.js";
import { mergedViolations, type RuleViolation, violationsOf } from "../validation.js";
import { cutShort, deadlinePassed } from "./deadline.js";
import { type CallFn, type Interceptor, OversizedRequest, type ServerCall, UndecodableRequest } from "./interceptor.js";
import { MAX_VIOLATIONS } from "./json-body.js";
import { MAX_TIMER_MS } from "../timers.js";

/** RED metrics: started, handled by code, handling seconds. Outermost, so every outcome counts. */
const rpcLabels = (method: DescMethod) => ({
  grpc_type: method.methodKind === "server_streaming" ? "server_stream" : "unary",
  grpc_service: method.parent.typeName,
  grpc_method: method.name,
});

/**
 * Counts a call refused before its chain ran (an HTTP request without a token that verifies, a body
 * too large or undecodable: connect.ts) in the same RPC metrics as the calls the chain ends.
 */
export function countRefusedEarly(metrics: ServerMetrics, method: DescMethod, code: status): void {
  const labels = rpcLabels(method);
  metrics.started.inc(labels);
  metrics.handled.inc({ ...labels, grpc_code: status[code] });
}

/** How often the expiries of short deadlines are logged, one line a method: each line counts the calls since the last. */
export const TOO_SHORT_LOG_EVERY_MS = 60_000;

/**
 * The expiry of a call whose caller left it less than its objective is the caller's doing, so it is
 * counted CANCELLED, not DEADLINE_EXCEEDED, which spends the tool's error budget (SERVER_FAULT_CODES
 * in deploy's alert conventions): one caller sending 10 ms deadlines to a 20 ms method would page
 * someone for a healthy tool. Only the count and the log say so; the caller still gets DEADLINE_EXCEEDED.
 * The first such expiry is logged, then at most one line every `everyMs` with the calls since: such a
 * caller sends them by the thousand, and a line each would flood the tool's log.
 */
function tooShortCounter(objectiveMs: number, everyMs: number): (call: ServerCall) => status {
  let unlogged = 0;
  let quietUntil = 0;
  return (call) => {
    unlogged += 1;
    const now = Date.now();
    if (now < quietUntil) return status.CANCELLED;
    call.log.info("deadline shorter than the method's latency objective: counted CANCELLED", {
      reason: "DEADLINE_TOO_SHORT",
      grpc_code: status[status.CANCELLED],
      deadline_ms: call.timeoutMs,
      objective_ms: objectiveMs,
      calls: unlogged,
    });
    unlogged = 0;
    quietUntil = now + everyMs;
    return status.CANCELLED;
  };
}

export function metricsStage(
  metrics: ServerMetrics,
  method: DescMethod,
  tooShortLogEveryMs = TOO_SHORT_LOG_EVERY_MS,
): Interceptor {
  const labels = rpcLabels(method);
  // Every series at 0 from the start, as go-grpc-prometheus's InitializeMetrics does: a counter that
  // first appears mid-window loses its first scrape's worth to increase(), which undercounts errors.
  metrics.started.inc(labels, 0);
  for (const code of Object.values(status).filter((c) => typeof c === "number"))
    metrics.handled.inc({ ...labels, grpc_code: status[code] }, 0);
  const objectiveMs = latencyObjectiveMs(method);
  const tooShort = tooShortCounter(objectiveMs, tooShortLogEveryMs);
  return (next) => async (call) => {
    const started = performance.now();
    metrics.started.inc(labels);
    let code = status.OK;
    try {
      return await next(call);
    } catch (error) {
      code = error instanceof ToolError ? error.code : status.UNKNOWN;
      // The objective is the figure the method's latency alert and its clients' breakers judge by.
      if (code === status.DEADLINE_EXCEEDED && cutShort(call.timeoutMs, objectiveMs)) code = tooShort(call);
      throw error;
    } finally {
      const done = { ...labels, grpc_code: status[code] };
      metrics.handled.inc(done);
      metrics.handlingSeconds.observe(done, (performance.now() - started) / 1000);
    }
  };
}

/** A server span from the caller's traceparent; the rest of the chain runs in its context and logs with its trace id. */
export function traceStage(method: DescMethod, log: Logger): Interceptor {
  const spanName = `${method.parent.typeName}/${method.name}`;
  const attributes = { "rpc.system": "grpc", "rpc.service": method.parent.typeName, "rpc.method": method.name };
  return (next) => async (call) => {
    const { span, context: spanContext, traceId } = startServerSpan(spanName, call.metadata, attributes);
    call.traceId = traceId;
    call.log = log.child({ trace_id: traceId, method: method.name });
    try {
      const response = await context.with(spanContext, next, undefined, call);
      span.setAttribute("rpc.grpc.status_code", status.OK);
      return response;
    } catch (error) {
      const failure = error as ToolError;
      span.setAttribute("rpc.grpc.status_code", failure.code);
      span.setStatus({ code: SpanStatusCode.ERROR, message: failure.reason });
      throw error;
    } finally {
      span.end();
    }
  };
}

/**
 * The single place an exception becomes a wire status: a ToolError with a reason from the
 * service's contract passes, anything else becomes INTERNAL (and is logged, never sent).
 */
export function errorsStage(reasons: ReadonlySet<string>): Interceptor {
  return (next) => async (call) => {
    try {
      return await next(call);
    } catch (error) {
      throw contractError(error, reasons, call.log);
    }
  };
}

export function contractError(error: unknown, reasons: ReadonlySet<string>, log: Logger): ToolError {
  if (error instanceof ToolError) {
    if (reasons.has(error.reason)) {
      if (error.code === status.INTERNAL || error.code === status.UNKNOWN)
        log.error("call failed", { reason: error.reason, error_name: error.name });
      return error;
    }
    log.error("handler used an error reason outside its contract", { reason: error.reason });
  } else {
    const name = error instanceof Error ? error.name : typeof error;
    log.error("unexpected exception in handler", {
      error_name: name,
      error_message: error instanceof Error ? error.message : "",
    });
  }
  return new ToolError(status.INTERNAL, "INTERNAL_ERROR", INTERNAL_MESSAGE);
}

/** The refusal of `bytes` bytes that are no `input` message in protobuf's binary form, over gRPC and Connect alike. */
export function undecodable(input: DescMessage, bytes: number): ToolError {
  return new ToolError(
    status.INVALID_ARGUMENT,
    "REQUEST_INVALID",
    `the request's ${bytes} bytes are not a ${input.name} in protobuf's binary form`,
  );
}

/**
 * A request the deserializer left undecoded is refused without work: one above its method's size
 * limit, or bytes that are no message of the method's input type (truncated, or not protobuf).
 */
export function undecodedStage(
  metrics: ServerMetrics,
  tool: string,
  method: DescMethod,
  maxRequestBytes: number,
): Interceptor {
  return (next) => (call) => {
    const { request } = call;
    if (request instanceof UndecodableRequest) return Promise.reject(undecodable(method.input, request.bytes));
    if (!(request instanceof OversizedRequest)) return next(call);
    metrics.tooLarge.inc({ tool, grpc_method: method.name });
    return Promise.reject(oversized(method, request.bytes, maxRequestBytes));
  };
}

/** The refusal of a request of `bytes` in protobuf's binary form, past the `maxRequestBytes` its method accepts. */
export function oversized(method: DescMethod, bytes: number, maxRequestBytes: number): ToolError {
  return new ToolError(
    status.INVALID_ARGUMENT,
    "REQUEST_TOO_LARGE",
    `${method.input.name} is ${bytes} bytes; ${method.name} accepts at most ${maxRequestBytes}`,
    { metadata: { bytes: String(bytes), max_bytes: String(maxRequestBytes) } },
  );
}

/** A method's `validate` hook (see Validator in options.ts). */
export type RequestRules = (request: unknown, caller: Caller) => readonly RuleViolation[];

/**
 * The request rewritten into its canonical form (if the service says how), then checked against its
 * contract and the service's own rules at once: every violation of both in one refusal.
 */
export function validateStage(
  method: DescMethod,
  normalise: ((request: unknown) => void) | undefined,
  rules?: RequestRules,
): Interceptor {
  return (next) => (call) => {
    normalise?.(call.request);
    const contract = violationsOf(method.input, call.request as MessageShape<typeof method.input>);
    const byRules = rules?.(call.request, call.caller!) ?? [];
    if (contract.length === 0 && byRules.length === 0) return next(call);
    const { violations, reason } = mergedViolations(method.input, contract, byRules);
    // The first ones only, as for a JSON body: a request with hundreds makes an answer too large
    // for the trailers, which grpc-js then never sends (the caller waits for its deadline).
    const named = violations.slice(0, MAX_VIOLATIONS);
    const more = violations.length - named.length;
    return Promise.reject(
      new ToolError(
        status.INVALID_ARGUMENT,
        reason,
        `invalid ${method.input.name}: ${named.map((v) => `${v.field}: ${v.description}`).join("; ")}${more > 0 ? `; and ${more} more` : ""}`,
        { fieldViolations: named },
      ),
    );
  };
}

/** The caller's deadline aborts the call's signal when it passes. */
export const deadlineStage: Interceptor = (next) => async (call) => {
  const leftMs = call.deadline ? Math.max(0, call.deadline.getTime() - Date.now()) : Number.POSITIVE_INFINITY;
  // A deadline further off than a timer can wait (24.8 days) is as good as none: its timer would fire at once.
  if (leftMs > MAX_TIMER_MS) return next(call);
  const timer = setTimeout(() => call.abort.abort(deadlinePassed()), leftMs);
  try {
    return await next(call);
  } finally {
    clearTimeout(timer);
  }
};

/** Drill faults switched on through ToolAdminService: added latency, errors, an outage, answers held back. */
export function faultStage(faults: FaultSwitch, metrics: ServerMetrics, tool: string, method: DescMethod): Interceptor {
  const kind = (k: string) => ({ tool, grpc_method: method.name, kind: k });
  const faulted = async (fault: FaultDecision, next: CallFn, call: ServerCall) => {
    if (fault.delayMs > 0) {
      metrics.faultsInjected.inc(kind("latency"));
      await sleep(fault.delayMs, undefined, { signal: call.abort.signal }).catch(() => undefined);
    }
    if (call.abort.signal.aborted) throw call.abort.signal.reason;
    if (fault.fail) {
      metrics.faultsInjected.inc(kind(fault.fail));
      throw new ToolError(status.UNAVAILABLE, "FAULT_INJECTED", `${tool} fault injected (${fault.fail})`, {
        ...(fault.retryAfterMs !== undefined ? { retryAfterMs: fault.retryAfterMs } : {}),
      });
    }
    const response = await next(call);
    if (fault.responseDelayMs > 0) {
      metrics.faultsInjected.inc(kind("response_delay"));
      // Not cut short by a cancel: the point is an answer that arrives late or never.
      await sleep(fault.responseDelayMs);
    }
    return response;
  };
  return (next) => (call) => {
    const fault = faults.decide(method.name);
    return fault === NO_FAULT ? next(call) : faulted(fault, next, call);
  };
}

/** Every response (each message of a stream) is built from the handler's answer and must meet its contract, or is withheld. */
export function responseContractStage(metrics: ServerMetrics, tool: string, method: DescMethod): Interceptor {
  const checked = (init: unknown, log: Logger) => {
    const response = create(method.output, init as MessageInitShape<typeof method.output>);
    const violations = violationsOf(method.output, response);
    if (violations.length === 0) return response;
    metrics.contractViolations.inc({ tool, grpc_method: method.name });
    log.error("response withheld: it breaks its contract", {
      violations: violations.map((v) => ({ field: v.field, reason: v.reason ?? "" })),
    });
    throw new ToolError(status.INTERNAL, "CONTRACT_VIOLATION", `${tool} produced a response that breaks its contract`);
  };
  if (method.methodKind === "server_streaming") {
    return (next) => (call) => {
      const send = call.send;
      call.send = (message) => send(checked(message, call.log));
      return next(call);
    };
  }
  return (next) => (call) => next(call).then((response) => checked(response, call.log));
}
