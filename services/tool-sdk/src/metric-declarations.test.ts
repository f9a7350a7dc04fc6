import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { declareIn } from "./metric-declarations.js";

describe("declareIn", () => {
  it("registers counters, gauges and histograms with their help and labels in the registry given", async () => {
    const registry = new Registry();
    const { counter, gauge, histogram } = declareIn(registry);
    counter("demo_calls_total", "Calls, by method.", ["method"]).inc({ method: "Get" });
    gauge("demo_open", "Open things.").set(3);
    histogram("demo_seconds", "Latency.", [0.1, 1], ["method"]).observe({ method: "Get" }, 0.5);
    const text = await registry.metrics();
    expect(text).toContain("# HELP demo_calls_total Calls, by method.\n# TYPE demo_calls_total counter");
    expect(text).toContain('demo_calls_total{method="Get"} 1');
    expect(text).toContain("# TYPE demo_open gauge\ndemo_open 3");
    expect(text).toContain('demo_seconds_bucket{le="0.1",method="Get"} 0');
    expect(text).toContain('demo_seconds_bucket{le="1",method="Get"} 1');
  });

  it("refuses a second metric of the same name in one registry", () => {
    const { counter } = declareIn(new Registry());
    counter("demo_total", "One.");
    expect(() => counter("demo_total", "Two.")).toThrow(/already been registered/);
  });
});
