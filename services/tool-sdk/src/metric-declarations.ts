// A counter, gauge or histogram in one call: name, help and labels (and buckets), registered in the
// registry that owns it. Gauges read at scrape time (collect) are declared with prom-client itself.
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

export interface MetricDeclarations {
  counter<L extends string = never>(name: string, help: string, labelNames?: readonly L[]): Counter<L>;
  gauge<L extends string = never>(name: string, help: string, labelNames?: readonly L[]): Gauge<L>;
  histogram<L extends string = never>(
    name: string,
    help: string,
    buckets: readonly number[],
    labelNames?: readonly L[],
  ): Histogram<L>;
}

export function declareIn(registry: Registry): MetricDeclarations {
  const registers = [registry];
  return {
    counter: (name, help, labelNames = []) => new Counter({ name, help, labelNames, registers }),
    gauge: (name, help, labelNames = []) => new Gauge({ name, help, labelNames, registers }),
    histogram: (name, help, buckets, labelNames = []) =>
      new Histogram({ name, help, buckets: [...buckets], labelNames, registers }),
  };
}
