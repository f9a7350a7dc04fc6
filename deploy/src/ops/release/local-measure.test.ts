// The local gate's measures from real prom-client pages (the metrics every tool exports): calls,
// server faults and the p95 between two readings, summed over pods, judged like the gate queries.
import { type AddressInfo, connect, createServer, type Socket } from "node:net";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { parseMetrics, ServerMetrics } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { methodSlos } from "../../manifests/slo-rules.js";
import { gateVerdict, judgedMethods } from "./gate.js";
import { bucketQuantile, measureLocally, type Reading, restartedPods } from "./local-measure.js";

const slos = methodSlos([BillingService]);

function record(metrics: ServerMetrics, method: string, code: string, calls: number, seconds: number): void {
  const labels = { grpc_type: "unary", grpc_service: BillingService.typeName, grpc_method: method, grpc_code: code };
  for (let i = 0; i < calls; i++) {
    metrics.handled.inc(labels);
    metrics.handlingSeconds.observe(labels, seconds);
  }
}

async function reading(pods: Record<string, ServerMetrics>): Promise<Reading> {
  return new Map(
    await Promise.all(
      Object.entries(pods).map(async ([pod, m]) => [pod, parseMetrics(await m.registry.metrics())] as const),
    ),
  );
}

describe("the local gate's measures", () => {
  it("count each method's calls and server faults over the window, across pods, and leave out methods with too few calls", async () => {
    const pods = { "billing-green-0": new ServerMetrics("billing"), "billing-green-1": new ServerMetrics("billing") };
    record(pods["billing-green-0"], "GetOrder", "OK", 50, 0.004);
    const before = await reading(pods);
    record(pods["billing-green-0"], "GetOrder", "OK", 140, 0.004);
    record(pods["billing-green-1"], "GetOrder", "OK", 140, 0.02);
    record(pods["billing-green-1"], "GetOrder", "UNAVAILABLE", 120, 0.001);
    record(pods["billing-green-1"], "GetOrder", "NOT_FOUND", 10, 0.001);
    record(pods["billing-green-0"], "Refund", "INTERNAL", 5, 0.3);
    const answers = measureLocally(slos, before, await reading(pods));
    expect(answers[0]).toEqual({
      kind: "error-ratio",
      values: [{ method: "GetOrder", value: expect.closeTo(120 / 410 / 0.005, 6) }],
    });
    // 410 calls: 120 in (0, 0.001], 10 more, 140 in (0.0025, 0.005], 140 in (0.01, 0.025]; rank 389.5 lies in the last.
    expect(answers[1]!.values[0]!.value * 0.15).toBeCloseTo(0.01 + 0.015 * ((389.5 - 270) / 140), 9);
    const verdict = gateVerdict(judgedMethods(slos), answers);
    expect(verdict.passed).toBe(false);
    expect(verdict.findings[0]).toBe("billing GetOrder error ratio 29.3 % (budget 0.5 %): above its budget");
  });

  it("answer nothing when no method had its minimum of calls, which never passes", async () => {
    const pod = new ServerMetrics("billing");
    const before = await reading({ pod });
    record(pod, "GetOrder", "OK", 199, 0.004);
    const answers = measureLocally(slos, before, await reading({ pod }));
    expect(answers.map((a) => a.values)).toEqual([[], []]);
    expect(gateVerdict(judgedMethods(slos), answers).passed).toBe(false);
  });

  it("answer nothing for pods that served nothing though they export every series at 0, which never passes", async () => {
    const pod = new ServerMetrics("billing");
    for (const method of BillingService.methods)
      for (const grpc_code of ["OK", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"])
        pod.handled.inc(
          { grpc_type: "unary", grpc_service: BillingService.typeName, grpc_method: method.name, grpc_code },
          0,
        );
    const idle = await reading({ pod });
    expect(idle.get("pod")!.filter((s) => s.name === "grpc_server_handled_total")).toHaveLength(12);
    const answers = measureLocally(slos, idle, idle);
    expect(answers.map((a) => a.values)).toEqual([[], []]);
    expect(gateVerdict(judgedMethods(slos), answers).passed).toBe(false);
  });

  it("fail a version whose pod crashed and restarted under its name inside the window while failing far above its budget", async () => {
    const a = new ServerMetrics("billing");
    let b = new ServerMetrics("billing");
    // Before the window (the smoke calls of the gate before the flip): b answered 300 calls, 1 of them INTERNAL.
    record(b, "GetOrder", "OK", 300, 0.004);
    record(b, "GetOrder", "INTERNAL", 1, 0.004);
    const before = await reading({ "billing-green-0": a, "billing-green-1": b });
    // In the window: a answers 600 calls; b fails 60 with INTERNAL, crashes, is restarted (fresh counters) and answers 100.
    record(a, "GetOrder", "OK", 600, 0.004);
    record(b, "GetOrder", "INTERNAL", 60, 0.004);
    b = new ServerMetrics("billing");
    record(b, "GetOrder", "OK", 100, 0.004);
    const answers = measureLocally(slos, before, await reading({ "billing-green-0": a, "billing-green-1": b }));
    // Reset-aware: b's calls since the restart count (100), its earlier ones are not subtracted (no negative ratio).
    expect(answers[0]!.values).toEqual([{ method: "GetOrder", value: 0 }]);
    const verdict = gateVerdict(judgedMethods(slos), answers);
    expect(verdict.passed).toBe(false);
    expect(verdict.findings[0]).toMatch(
      /^billing-green-1 restarted during the gate's window \(grpc_server_handled_total\{.*grpc_code="OK".*\} went from 300 to 100\)/,
    );
  });

  it("fail a version whose pod started again inside the window though every counter is higher than before", () => {
    const page = (started: number, calls: number) =>
      parseMetrics(
        `# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds ${started}\n` +
          `# TYPE grpc_server_handled_total counter\ngrpc_server_handled_total{grpc_method="GetOrder",grpc_code="OK"} ${calls}\n`,
      );
    const before: Reading = new Map([["billing-green-0", page(1_800_000_000, 40)]]);
    expect(restartedPods(before, new Map([["billing-green-0", page(1_800_000_000, 400)]]))).toEqual([]);
    expect(restartedPods(before, new Map([["billing-green-0", page(1_800_000_030, 400)]]))).toEqual([
      { pod: "billing-green-0", evidence: "its process start time went from 1800000000 to 1800000030" },
    ]);
  });

  it("read a page that declares no types by the names' convention: a _total that went back is a restart", () => {
    const page = (calls: number) => parseMetrics(`grpc_server_handled_total{grpc_code="OK"} ${calls}\n`);
    const before: Reading = new Map([["risk-green-0", page(40)]]);
    expect(restartedPods(before, new Map([["risk-green-0", page(41)]]))).toEqual([]);
    expect(restartedPods(before, new Map([["risk-green-0", page(3)]]))).toEqual([
      { pod: "risk-green-0", evidence: 'grpc_server_handled_total{grpc_code="OK"} went from 40 to 3' },
    ]);
  });

  it("pass a healthy pod whose gauges named like counters went down in the window (nodejs_active_handles_total)", async () => {
    const pod = new ServerMetrics("billing");
    // Ten connections open while the window starts, closed inside it: the handles gauge falls by twenty.
    const listener = createServer((socket) => socket.on("error", () => {}));
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    const { port } = listener.address() as AddressInfo;
    const sockets = await Promise.all(
      Array.from(
        { length: 10 },
        () =>
          new Promise<Socket>((resolve, reject) => {
            const socket = connect(port, "127.0.0.1", () => resolve(socket)).once("error", reject);
          }),
      ),
    );
    const before = await reading({ "billing-green-0": pod });
    await new Promise((resolve) => {
      listener.close(resolve);
      for (const socket of sockets) socket.destroy();
    });
    record(pod, "GetOrder", "OK", 400, 0.004);
    const after = await reading({ "billing-green-0": pod });
    const handles = (r: Reading) =>
      r.get("billing-green-0")!.find((s) => s.name === "nodejs_active_handles_total")!.value;
    expect(handles(after)).toBeLessThan(handles(before));
    const verdict = gateVerdict(judgedMethods(slos), measureLocally(slos, before, after));
    expect(verdict.findings).toEqual([
      "billing GetOrder error ratio 0 % (budget 0.5 %)",
      "billing GetOrder p95 5 ms (target 150 ms)",
    ]);
    expect(verdict.passed).toBe(true);
  });

  it("never pass a negative or NaN measure (no evidence), as the gate on any path", () => {
    const methods = judgedMethods(slos);
    for (const value of [-0.4, Number.NaN]) {
      const verdict = gateVerdict(methods, [
        { kind: "error-ratio", values: [{ method: "GetOrder", value }] },
        { kind: "p95", values: [{ method: "GetOrder", value: 0.5 }] },
      ]);
      expect(verdict.passed).toBe(false);
      expect(verdict.findings[0]).toMatch(/^billing GetOrder error ratio .*: not a measure$/);
    }
  });

  it("interpolate within a bucket as PromQL's histogram_quantile does, and give NaN without calls", () => {
    const buckets = new Map([
      [0.1, 50],
      [0.25, 100],
      [Infinity, 100],
    ]);
    expect(bucketQuantile(0.95, buckets)).toBeCloseTo(0.235, 9);
    expect(bucketQuantile(0.95, new Map([...buckets, [Infinity, 200]]))).toBe(0.25);
    expect(bucketQuantile(0.95, new Map([[Infinity, 0]]))).toBeNaN();
  });
});
