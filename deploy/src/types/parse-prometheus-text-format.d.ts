// The package ships no types; this is the part of its output (prom2json's shape) the drills read.
declare module "parse-prometheus-text-format" {
  interface MetricFamily {
    readonly name: string;
    readonly help: string;
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    readonly metrics: readonly { readonly value?: string; readonly labels?: Record<string, string> }[];
  }
  export default function parsePrometheusTextFormat(text: string): MetricFamily[];
}
