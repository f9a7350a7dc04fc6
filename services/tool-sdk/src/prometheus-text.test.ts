import { describe, expect, it } from "vitest";
import { metricValue, parseMetrics, samplesOf } from "./prometheus-text.js";

const PAGE = `# HELP grpc_server_handled_total Calls by code.
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_service="s",grpc_method="A",grpc_code="OK"} 7
grpc_server_handled_total{grpc_service="s",grpc_method="B",grpc_code="OK"} 3 1395066363000
# TYPE grpc_server_handling_seconds histogram
grpc_server_handling_seconds_bucket{grpc_method="A",le="0.1"} 5
grpc_server_handling_seconds_bucket{grpc_method="A",le="+Inf"} 7
grpc_server_handling_seconds_bucket{grpc_method="B",le="0.1"} 1
grpc_server_handling_seconds_bucket{grpc_method="B",le="+Inf"} 3
process_cpu_seconds_total 1.5
# TYPE nodejs_active_handles_total gauge
nodejs_active_handles_total 4
odd{path="C:\\\\DIR",why="say \\"hi\\"\\nthere"} 2
`;

describe("parseMetrics", () => {
  it("keeps every labelled series of a histogram apart", () => {
    const buckets = samplesOf(parseMetrics(PAGE), "grpc_server_handling_seconds_bucket", { le: "+Inf" });
    expect(buckets.map((s) => [s.labels.grpc_method, s.value])).toEqual([
      ["A", 7],
      ["B", 3],
    ]);
  });

  it("reads samples without labels and ignores a timestamp", () => {
    const samples = parseMetrics(PAGE);
    expect(samplesOf(samples, "process_cpu_seconds_total")[0]?.value).toBe(1.5);
    expect(samplesOf(samples, "grpc_server_handled_total", { grpc_method: "B" })[0]?.value).toBe(3);
  });

  it("types each series by its family's TYPE line, a histogram's buckets included, whatever the name ends with", () => {
    const types = new Map(parseMetrics(PAGE).map((s) => [s.name, s.type]));
    expect(Object.fromEntries(types)).toEqual({
      grpc_server_handled_total: "counter",
      grpc_server_handling_seconds_bucket: "histogram",
      process_cpu_seconds_total: "untyped",
      nodejs_active_handles_total: "gauge",
      odd: "untyped",
    });
  });

  it("unescapes label values", () => {
    expect(samplesOf(parseMetrics(PAGE), "odd")[0]?.labels).toEqual({ path: "C:\\DIR", why: 'say "hi"\nthere' });
  });
});

describe("metricValue", () => {
  it("sums the samples whose labels include the ones asked for", () => {
    expect(metricValue(PAGE, "grpc_server_handled_total")).toBe(10);
    expect(metricValue(PAGE, "grpc_server_handled_total", { grpc_method: "A" })).toBe(7);
    expect(metricValue(PAGE, "grpc_server_handled_total", { grpc_method: "C" })).toBe(0);
  });
});
