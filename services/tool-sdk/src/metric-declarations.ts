// A counter or gauge in one call: name, help and labels, registered in the registry that owns it.
// Histograms (buckets) and gauges read at scrape time (collect) are declared with prom-client itself.
import { Counter, Gauge, type Registry } from "prom-client";

export interface MetricDeclarations {
  counter<L extends string = never>(name: string, help: string, labelNames?: readonly L[]): Counter<L>;
  gauge<L extends string = never>(name: string, help: string, labelNames?: readonly L[]): Gauge<L>;
}

export function declareIn(registry: Registry): MetricDeclarations {
  const registers = [registry];
  return {
    counter: (name, help, labelNames = []) => new Counter({ name, help, labelNames, registers }),
    gauge: (name, help, labelNames = []) => new Gauge({ name, help, labelNames, registers }),
  };
}
