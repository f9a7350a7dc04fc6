import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { declareIn } from "./metric-declarations.js";

describe("declareIn", () => {
  it("registers counters and gauges with their help and labels in the registry given", async () => {
    const registry = new Registry();
    const { counter, gauge } = declareIn(registry);
    counter("demo_calls_total", "Calls, by method.", ["method"]).inc({ method: "Get" });
    gauge("demo_open", "Open things.").set(3);
    const text = await registry.metrics();
    expect(text).toContain("# HELP demo_calls_total Calls, by method.\n# TYPE demo_calls_total counter");
    expect(text).toContain('demo_calls_total{method="Get"} 1');
    expect(text).toContain("# TYPE demo_open gauge\ndemo_open 3");
  });

  it("refuses a second metric of the same name in one registry", () => {
    const { counter } = declareIn(new Registry());
    counter("demo_total", "One.");
    expect(() => counter("demo_total", "Two.")).toThrow(/already been registered/);
  });
});
