// Whose doing a call's end at its deadline is: the deadline's or the caller's cancel (deadline.ts),
// and how the metrics stage counts an expiry the caller's short deadline made (stages.ts).
import { Metadata } from "@grpc/grpc-js";
import { refusal } from "@loopguard/test-kit";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { describe, expect, it, vi } from "vitest";
import { metricValue } from "../../testing/index.js";
import { status, ToolError } from "../errors.js";
import { createLogger } from "../logger.js";
import { ServerMetrics } from "../metrics.js";
import { cancelledAt, cutShort, DEADLINE_TRIP_SHARE, deadlinePassed, TIMEOUT_SENDING_MS } from "./deadline.js";
import { compose, type ServerCall } from "./interceptor.js";
import { metricsStage } from "./stages.js";

const method = KbSearchService.method.search; // SLA: p95_target_ms 300, timeout_ms 1000

describe("cancelledAt", () => {
  const deadline = new Date(1_000_000);
  const code = (call: Pick<ServerCall, "deadline" | "timeoutMs">, now: number) => cancelledAt(call, now).code;

  it("takes a cancel at or after the deadline for the deadline", () => {
    expect(code({ deadline, timeoutMs: 1000 }, deadline.getTime())).toBe(status.DEADLINE_EXCEEDED);
    expect(code({ deadline, timeoutMs: 1000 }, deadline.getTime() + 5)).toBe(status.DEADLINE_EXCEEDED);
    expect(deadlinePassed().reason).toBe("DEADLINE_PASSED");
  });

  it("takes a cancel in the last quarter of the call's time for the caller's own deadline, arrived first", () => {
    const now = deadline.getTime() - 1000 * DEADLINE_TRIP_SHARE;
    expect(code({ deadline, timeoutMs: 1000 }, now)).toBe(status.DEADLINE_EXCEEDED);
    expect(code({ deadline, timeoutMs: 1000 }, now - 1)).toBe(status.CANCELLED);
    expect(code({ deadline, timeoutMs: 40 }, deadline.getTime() - 10)).toBe(status.DEADLINE_EXCEEDED);
    expect(code({ deadline, timeoutMs: 40 }, deadline.getTime() - 11)).toBe(status.CANCELLED);
  });

  it("leaves a call without a deadline cancelled", () => {
    const error = cancelledAt({ deadline: undefined, timeoutMs: undefined });
    expect([error.code, error.reason]).toEqual([status.CANCELLED, "CALL_CANCELLED"]);
  });
});

describe("cutShort", () => {
  it("takes a deadline below the objective for cut short", () => {
    expect(cutShort(10, 300)).toBe(true);
    expect(cutShort(300 - TIMEOUT_SENDING_MS - 1, 300)).toBe(true);
    expect(cutShort(1000, 1200)).toBe(true);
  });

  it("takes a deadline that covered the objective, or lost only its sending on the way, for the tool's", () => {
    expect(cutShort(300, 300)).toBe(false);
    expect(cutShort(300 - TIMEOUT_SENDING_MS, 300)).toBe(false);
    expect(cutShort(undefined, 300)).toBe(false);
  });
});

describe("metricsStage on calls that end at their deadline", () => {
  /** A call of Search that arrived with `timeoutMs`, logging into `logged`. */
  const searchCall = (timeoutMs: number | undefined, logged: string[]): ServerCall => ({
    method,
    request: {},
    metadata: new Metadata(),
    deadline: timeoutMs === undefined ? undefined : new Date(Date.now() + timeoutMs),
    timeoutMs,
    abort: new AbortController(),
    caller: undefined,
    traceId: "",
    log: createLogger({ service: "test", write: (line) => logged.push(line) }),
    send: async () => undefined,
  });

  async function counted(timeoutMs: number | undefined, end: ToolError) {
    const metrics = new ServerMetrics("kb-search");
    const logged: string[] = [];
    const call = searchCall(timeoutMs, logged);
    const thrown = await refusal(compose([metricsStage(metrics, method)], () => Promise.reject(end))(call), ToolError);
    const page = await metrics.registry.metrics();
    const handled = (code: string) =>
      metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: code });
    return { thrown, deadlineExceeded: handled("DEADLINE_EXCEEDED"), cancelled: handled("CANCELLED"), logged };
  }

  it("counts the expiry of a deadline that covered the method's p95 target DEADLINE_EXCEEDED", async () => {
    for (const timeoutMs of [295, 300, 1000, undefined]) {
      const { deadlineExceeded, cancelled, logged } = await counted(timeoutMs, deadlinePassed());
      expect([deadlineExceeded, cancelled, logged]).toEqual([1, 0, []]);
    }
  });

  it("counts the expiry of a deadline below the p95 target CANCELLED, logged as DEADLINE_TOO_SHORT, and passes the error on", async () => {
    const { thrown, deadlineExceeded, cancelled, logged } = await counted(200, deadlinePassed());
    expect([deadlineExceeded, cancelled]).toEqual([0, 1]);
    expect(thrown.code).toBe(status.DEADLINE_EXCEEDED);
    expect(logged.map((line) => JSON.parse(line))).toEqual([
      expect.objectContaining({
        reason: "DEADLINE_TOO_SHORT",
        grpc_code: "CANCELLED",
        deadline_ms: 200,
        objective_ms: 300,
      }),
    ]);
  });

  it("logs a flood of short deadlines once, then once a period with the calls since, and counts every one", async () => {
    const metrics = new ServerMetrics("kb-search");
    const logged: string[] = [];
    const chain = compose([metricsStage(metrics, method, 100)], () => Promise.reject(deadlinePassed()));
    const expire = () => refusal(chain(searchCall(10, logged)), ToolError);
    // The clock stands still while the fifty expire, however slowly a loaded machine runs them (on the
    // real clock a stall past the 100 ms period made a second line), then moves past the period.
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      for (let i = 0; i < 50; i++) await expire();
      expect(logged.map((line) => JSON.parse(line).calls)).toEqual([1]);
      vi.setSystemTime(Date.now() + 120);
      await expire();
    } finally {
      vi.useRealTimers();
    }
    expect(logged.map((line) => JSON.parse(line).calls)).toEqual([1, 50]);
    const page = await metrics.registry.metrics();
    expect(metricValue(page, "grpc_server_handled_total", { grpc_method: "Search", grpc_code: "CANCELLED" })).toBe(51);
  });

  it("leaves other outcomes of a short deadline as they are", async () => {
    const { cancelled, logged } = await counted(10, new ToolError(status.UNAVAILABLE, "FAULT_INJECTED", "x"));
    expect([cancelled, logged]).toEqual([0, []]);
  });
});
