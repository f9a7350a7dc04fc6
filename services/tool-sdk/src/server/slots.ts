// Load shedding: unary calls and server streams counted apart (long-lived streams never take the
// slots of short calls), both also per caller (one caller cannot take every slot and starve the
// others), and the drain gate that refuses new calls.
import type { DescMethod } from "@bufbuild/protobuf";
import { status, ToolError } from "../errors.js";
import type { ServerMetrics } from "../metrics.js";
import type { Interceptor } from "./interceptor.js";

/** Wait suggested to a caller refused a stream: streams are long-lived, so a slot frees slowly. */
const STREAM_RETRY_AFTER_MS = 1000;

export interface SlotLimits {
  /** Unary calls handled at once. */
  readonly maxConcurrent: number;
  /** Unary calls one caller (token subject) may have in flight at once, at most maxConcurrent. */
  readonly maxConcurrentPerCaller: number;
  readonly maxStreams: number;
  readonly maxStreamsPerCaller: number;
  /** Wait suggested to callers refused for overload. */
  readonly shedRetryAfterMs: number;
}

/** What is running: unary calls, open streams (each with its controller, so a drain can end them). */
export class CallSlots {
  inFlight = 0;
  readonly streams = new Set<AbortController>();
  readonly #streamsByCaller = new Map<string, number>();
  readonly #callsByCaller = new Map<string, number>();
  #draining = false;
  #drained: (() => void) | undefined;

  constructor(
    readonly tool: string,
    readonly limits: SlotLimits,
    private readonly metrics: ServerMetrics,
  ) {}

  get draining(): boolean {
    return this.#draining;
  }

  idle(): boolean {
    return this.inFlight === 0 && this.streams.size === 0;
  }

  /** Refuse new calls from now on, end open streams with `ending`; resolves when nothing runs. */
  drain(ending: ToolError): Promise<void> {
    this.#draining = true;
    for (const stream of this.streams) stream.abort(ending);
    return this.idle() ? Promise.resolve() : new Promise<void>((resolve) => (this.#drained = resolve));
  }

  /** The drain gate: once draining, new calls are refused UNAVAILABLE (retry at once elsewhere). */
  drainGate(): Interceptor {
    const refusal = () =>
      new ToolError(status.UNAVAILABLE, "SHUTTING_DOWN", `${this.tool} is shutting down`, { retryAfterMs: 0 });
    return (next) => (call) => (this.#draining ? Promise.reject(refusal()) : next(call));
  }

  /** Unary calls past maxConcurrent are refused RESOURCE_EXHAUSTED OVERLOADED; a slot is held until the handler ends. */
  unaryShed(method: DescMethod): Interceptor {
    const { tool, metrics } = this;
    const { maxConcurrent, shedRetryAfterMs } = this.limits;
    const shed = new ToolError(
      status.RESOURCE_EXHAUSTED,
      "OVERLOADED",
      `${tool} is at its concurrency limit of ${maxConcurrent}`,
      { retryAfterMs: shedRetryAfterMs },
    );
    const labels = { tool, grpc_method: method.name };
    const gauge = { tool };
    return (next) => async (call) => {
      if (this.inFlight >= maxConcurrent) {
        metrics.shed.inc(labels);
        throw shed;
      }
      this.inFlight += 1;
      metrics.inFlight.set(gauge, this.inFlight);
      const release = () => {
        this.inFlight -= 1;
        metrics.inFlight.set(gauge, this.inFlight);
        this.#settled();
      };
      try {
        return await next(call);
      } finally {
        // A call answered before its handler ended (cancelled, past its deadline) holds its slot until the handler ends.
        if (call.abandoned) void call.abandoned.then(release);
        else release();
      }
    };
  }

  /**
   * One caller (by token subject) may have maxConcurrentPerCaller unary calls in flight; past it
   * RESOURCE_EXHAUSTED OVERLOADED (metadata limit: caller). Goes after auth; like the server's slot,
   * a call answered before its handler ended holds its caller's slot until the handler ends.
   */
  unaryPerCaller(method: DescMethod): Interceptor {
    const { tool, metrics } = this;
    const { maxConcurrentPerCaller, shedRetryAfterMs } = this.limits;
    const labels = { tool, grpc_method: method.name };
    return (next) => async (call) => {
      const subject = call.caller?.subject ?? "";
      const held = this.#callsByCaller.get(subject) ?? 0;
      if (held >= maxConcurrentPerCaller) {
        metrics.shed.inc(labels);
        throw new ToolError(
          status.RESOURCE_EXHAUSTED,
          "OVERLOADED",
          `${subject} has ${held} calls in flight on ${tool}, as many as one caller may; retry once one has ended`,
          {
            retryAfterMs: shedRetryAfterMs,
            metadata: { limit: "caller", max_concurrent_per_caller: String(maxConcurrentPerCaller) },
          },
        );
      }
      countUp(this.#callsByCaller, subject);
      const release = () => countDown(this.#callsByCaller, subject);
      try {
        return await next(call);
      } finally {
        if (call.abandoned) void call.abandoned.then(release);
        else release();
      }
    };
  }

  /** Streams past maxStreams are refused RESOURCE_EXHAUSTED TOO_MANY_STREAMS (limit: server). */
  streamShed(method: DescMethod): Interceptor {
    const { tool, metrics } = this;
    const { maxStreams } = this.limits;
    const full = new ToolError(
      status.RESOURCE_EXHAUSTED,
      "TOO_MANY_STREAMS",
      `${tool} has ${maxStreams} streams open, as many as it serves at once; retry later`,
      {
        retryAfterMs: STREAM_RETRY_AFTER_MS,
        metadata: { limit: "server", max_streams: String(maxStreams) },
      },
    );
    return (next) => async (call) => {
      if (this.streams.size >= maxStreams) {
        metrics.streamsRefused.inc({ tool, grpc_method: method.name, limit: "server" });
        throw full;
      }
      this.streams.add(call.abort);
      metrics.openStreams.set({ tool }, this.streams.size);
      try {
        return await next(call);
      } finally {
        this.streams.delete(call.abort);
        metrics.openStreams.set({ tool }, this.streams.size);
        this.#settled();
      }
    };
  }

  /** One caller (by token subject) may hold maxStreamsPerCaller streams; goes after auth. */
  streamsPerCaller(method: DescMethod): Interceptor {
    const { tool, metrics } = this;
    const { maxStreamsPerCaller } = this.limits;
    return (next) => async (call) => {
      const subject = call.caller?.subject ?? "";
      const held = this.#streamsByCaller.get(subject) ?? 0;
      if (held >= maxStreamsPerCaller) {
        metrics.streamsRefused.inc({ tool, grpc_method: method.name, limit: "caller" });
        throw new ToolError(
          status.RESOURCE_EXHAUSTED,
          "TOO_MANY_STREAMS",
          `${subject} has ${held} streams open on ${tool}, as many as one caller may; close one or retry later`,
          {
            retryAfterMs: STREAM_RETRY_AFTER_MS,
            metadata: { limit: "caller", max_streams: String(maxStreamsPerCaller) },
          },
        );
      }
      countUp(this.#streamsByCaller, subject);
      try {
        return await next(call);
      } finally {
        countDown(this.#streamsByCaller, subject);
      }
    };
  }

  #settled(): void {
    if (this.#draining && this.idle()) this.#drained?.();
  }
}

function countUp(counts: Map<string, number>, subject: string): void {
  counts.set(subject, (counts.get(subject) ?? 0) + 1);
}

/** Callers with nothing in flight leave the map: it holds only the callers being served. */
function countDown(counts: Map<string, number>, subject: string): void {
  const left = (counts.get(subject) ?? 1) - 1;
  if (left > 0) counts.set(subject, left);
  else counts.delete(subject);
}
