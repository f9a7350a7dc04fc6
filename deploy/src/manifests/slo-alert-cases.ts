// promtool unit tests generated with the rules, so that every contract method's alerts are shown
// to fire and to stay quiet with its own selectors and numbers, close to each threshold: errors at
// 18× the budget (past the page's 14.4×) and every call 1 ms slower than the p95 target fire its
// latency and both burn-rate alerts; errors at 5× (under the ticket's 6×) and every call within
// the target fire none; every call failing at 10 an hour fires AllCallsFailing and neither burn-rate
// alert (under their floor); a failed scrape fires its tool's Down. The scenarios (a short spike, a
// sustained outage, no target at all, the agents' alerts) are hand-written in the rules-*.test.yml files.
// A tool's cases are a file of their own that loads only the rule group of the alerts they name:
// promtool evaluates every rule a test file loads at every step of every test.
import { relative } from "node:path";
import { ruleFileOf, SLO_ALERT_TESTS_DIR } from "./prometheus-files.js";
import { BURN_RATE_ALERTS, type MethodSlo, pascalCase, type Rule, type RuleFile } from "./slo-rules.js";

const EVAL = "30m";
const SAMPLES = 40;
const CALLS_PER_MINUTE = 1000;
const FIRING_BURN = 18;
const QUIET_BURN = 5;
/** The every-call-failing scenario's length: its 1h window full, and the alert's `for` past. */
const LOW_TRAFFIC_MINUTES = 60;

type Labels = Readonly<Record<string, string>>;
type Alert = { exp_labels: Labels; exp_annotations: Labels };
type AlertTest = { eval_time: string; alertname: string; exp_alerts: Alert[] };
type Series = { series: string; values: string };
type TestGroup = { interval: string; input_series: Series[]; alert_rule_test: AlertTest[] };

function seriesName(metric: string, labels: Labels): string {
  const matchers = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return `${metric}{${matchers.join(",")}}`;
}

/** Go's %.4g for the magnitudes these tests produce (no exponent form). */
function g4(value: number): string {
  if (!(value >= 0.001 && value < 1000)) throw new Error(`no rendering for ${value}`);
  return String(Number(value.toPrecision(4)));
}

/** Prometheus's template functions, for the values these tests produce. */
const HUMANIZE: Readonly<Record<string, (v: number) => string>> = {
  humanizePercentage: (v) => `${g4(v * 100)}%`,
  humanizeDuration: (v) => {
    if (v >= 60) throw new Error(`no rendering for ${v} s`);
    return v < 1 ? `${g4(v * 1000)}ms` : `${g4(v)}s`;
  },
};

/** The alert's annotation as Prometheus renders it; throws on a template construct it does not know. */
function render(template: string, value: number, labels: Labels): string {
  const text = template
    .replace(
      /\{\{ if \$labels\.(\w+) \}\}(.*?)\{\{ else \}\}(.*?)\{\{ end \}\}/gs,
      (_, name: string, then: string, other: string) => (labels[name] ? then : other),
    )
    .replace(/\{\{ \$value \| (\w+) \}\}/g, (whole: string, fn: string) => HUMANIZE[fn]?.(value) ?? whole)
    .replace(/\{\{ \$labels\.(\w+) \}\}/g, (_, name: string) => labels[name] ?? "");
  if (text.includes("{{")) throw new Error(`cannot render ${template}`);
  return text;
}

function expected(rule: Rule, seriesLabels: Labels, value: number): Alert {
  const labels = { ...seriesLabels, ...(rule.labels as Labels) };
  const annotations = Object.fromEntries(
    Object.entries(rule.annotations as Labels).map(([k, v]) => [k, render(v, value, labels)]),
  );
  return { exp_labels: labels, exp_annotations: annotations };
}

/** Counters and histogram buckets of one method: `perMinute` calls by code; `buckets` each bound's cumulative share of them. */
function methodSeries(
  slo: MethodSlo,
  perMinute: Readonly<Record<string, number>>,
  buckets: Readonly<Record<string, number>>,
): Series[] {
  const call = { grpc_type: "unary", grpc_service: slo.method.parent.typeName, grpc_method: slo.method.name };
  const counter = (n: number) => (n === 0 ? `0x${SAMPLES}` : `0+${n}x${SAMPLES}`);
  return Object.entries(perMinute).flatMap(([code, n]) => [
    { series: seriesName("grpc_server_handled_total", { ...call, grpc_code: code }), values: counter(n) },
    ...Object.entries(buckets).map(([le, share]) => ({
      series: seriesName("grpc_server_handling_seconds_bucket", { ...call, grpc_code: code, le }),
      values: counter(n * share),
    })),
  ]);
}

/** A method's calls per minute by code: `burn` times its error budget fail. */
function callsAt(slo: MethodSlo, burn: number): Record<string, number> {
  const faults = Number((CALLS_PER_MINUTE * burn * slo.errorRateBudget).toPrecision(6));
  return { OK: CALLS_PER_MINUTE - faults, UNAVAILABLE: faults };
}

/** Four tests per tool: its methods breaching, within their SLOs, every call failing at low traffic; its scrape failing. */
function toolCases(tool: string, slos: readonly MethodSlo[], alertRule: (name: string) => Rule): TestGroup[] {
  const prefix = pascalCase(tool);
  const instance = { job: tool, instance: `${tool}-0` };
  const up = (value: number) => ({ series: seriesName("up", instance), values: `${value}x${SAMPLES}` });
  const down = (): AlertTest => ({ eval_time: EVAL, alertname: `${prefix}Down`, exp_alerts: [] });
  const names = (slo: MethodSlo) => [
    `${prefix}${slo.method.name}LatencyAboveSlo`,
    ...BURN_RATE_ALERTS.map((b) => `${prefix}${slo.method.name}${b.kind}`),
  ];

  // Past the last finite bucket, histogram_quantile answers that bucket's bound: p95 is exactly `slow`.
  const slow = (slo: MethodSlo) => (slo.p95TargetMs + 1) / 1000;
  const breach = slos.flatMap((slo) =>
    methodSeries(slo, callsAt(slo, FIRING_BURN), { [String(slow(slo))]: 0, "+Inf": 1 }),
  );
  const firing = slos.flatMap((slo) => {
    const where = { grpc_service: slo.method.parent.typeName, grpc_method: slo.method.name };
    const values = [
      slow(slo),
      ...BURN_RATE_ALERTS.map(() => callsAt(slo, FIRING_BURN).UNAVAILABLE! / CALLS_PER_MINUTE),
    ];
    return names(slo).map((alertname, i) => ({
      eval_time: EVAL,
      alertname,
      exp_alerts: [expected(alertRule(alertname), where, values[i]!)],
    }));
  });

  const within = slos.flatMap((slo) => {
    const target = slo.p95TargetMs / 1000;
    return methodSeries(slo, callsAt(slo, QUIET_BURN), { [String(target / 2)]: 0, [String(target)]: 1, "+Inf": 1 });
  });
  const quiet = slos.flatMap((slo) => names(slo).map((alertname) => ({ eval_time: EVAL, alertname, exp_alerts: [] })));

  // Every call failing at 10 calls an hour (one every 6 minutes), under the burn-rate alerts' floor:
  // AllCallsFailing pages while the burn-rate alerts stay quiet.
  const allFailing = (slo: MethodSlo) => `${prefix}${slo.method.name}AllCallsFailing`;
  const rare = Array.from({ length: LOW_TRAFFIC_MINUTES + 1 }, (_, m) => Math.floor(m / 6) + 1).join(" ");
  const outage: TestGroup = {
    interval: "1m",
    input_series: [
      ...slos.flatMap((slo) => {
        const call = { grpc_type: "unary", grpc_service: slo.method.parent.typeName, grpc_method: slo.method.name };
        return [
          {
            series: seriesName("grpc_server_handled_total", { ...call, grpc_code: "OK" }),
            values: `0x${LOW_TRAFFIC_MINUTES}`,
          },
          { series: seriesName("grpc_server_handled_total", { ...call, grpc_code: "UNAVAILABLE" }), values: rare },
        ];
      }),
      up(1),
    ],
    alert_rule_test: slos.flatMap((slo) => {
      const where = { grpc_service: slo.method.parent.typeName, grpc_method: slo.method.name };
      const at = `${LOW_TRAFFIC_MINUTES}m`;
      return [
        { eval_time: at, alertname: allFailing(slo), exp_alerts: [expected(alertRule(allFailing(slo)), where, 1)] },
        ...BURN_RATE_ALERTS.map((b) => ({
          eval_time: at,
          alertname: `${prefix}${slo.method.name}${b.kind}`,
          exp_alerts: [],
        })),
      ];
    }),
  };
  const notAllFailing = slos.map((slo) => ({ eval_time: EVAL, alertname: allFailing(slo), exp_alerts: [] }));

  const scrapeFails: TestGroup = {
    interval: "1m",
    input_series: [up(0)],
    alert_rule_test: [
      { eval_time: EVAL, alertname: `${prefix}Down`, exp_alerts: [expected(alertRule(`${prefix}Down`), instance, 0)] },
    ],
  };
  if (slos.length === 0) return [scrapeFails];
  return [
    { interval: "1m", input_series: [...breach, up(1)], alert_rule_test: [...firing, ...notAllFailing, down()] },
    { interval: "1m", input_series: [...within, up(1)], alert_rule_test: [...quiet, ...notAllFailing, down()] },
    outage,
    scrapeFails,
  ];
}

/** Each of `tools`' promtool test file (tool → its content), loading the rule groups of the alerts it names. */
export function sloAlertCases(
  rules: RuleFile,
  slos: readonly MethodSlo[],
  tools: readonly string[],
): Map<string, object> {
  const alerts = new Map(
    rules.groups.flatMap((g) =>
      g.rules.flatMap((r) => (typeof r.alert === "string" ? [[r.alert, { rule: r, group: g.name }] as const] : [])),
    ),
  );
  const alertOf = (name: string) => {
    const found = alerts.get(name);
    if (!found) throw new Error(`no alert ${name} in the rules`);
    return found;
  };
  const ofTool = (tool: string) => slos.filter((s) => s.tool === tool);
  return new Map(
    tools.map((tool) => {
      const tests = toolCases(tool, ofTool(tool), (name) => alertOf(name).rule);
      const groups = [...new Set(tests.flatMap((t) => t.alert_rule_test).map((c) => alertOf(c.alertname).group))];
      return [
        tool,
        {
          rule_files: groups.map((group) => relative(SLO_ALERT_TESTS_DIR, ruleFileOf(group))),
          evaluation_interval: "1m",
          tests,
        },
      ];
    }),
  );
}
