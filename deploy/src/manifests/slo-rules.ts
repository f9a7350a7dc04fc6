// Prometheus SLO rules derived from the contracts: every unary method's SLA option
// (p95_target_ms, error_rate_budget) becomes a latency alert, two error-budget burn-rate alerts
// and, under their traffic floor, an every-call-failing alert over the standard gRPC server
// metrics, and every tool gets a Down alert. Deploy config
// may override the numbers per method; the contract stays the default.
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { methodPolicy, servicePolicy } from "@loopguard/tool-sdk";
import {
  pascalCase,
  percent,
  type Rule,
  type RuleFile,
  runbookUrl,
  SERVER_FAULT_CODES,
  SEVERITY,
} from "./alert-conventions.js";
import { allCallsFailingAlert, downAlert } from "./outage-rules.js";
import type { SloOverrides } from "./slo-overrides.js";

export { pascalCase, type Rule, type RuleFile, type RuleGroup, SERVER_FAULT_CODES } from "./alert-conventions.js";

export const P95_RECORD = "loopguard:grpc_server_p95_seconds:5m";
/** The release analysis's window, recorded so that an operator can read what a release gate measured. */
export const ERROR_RATIO_RECORD = "loopguard:grpc_server_error_ratio:rate3m";

/** The recorded error ratio over one of the burn-rate alerts' windows. */
export function errorRatioRecord(window: string): string {
  return `loopguard:grpc_server_error_ratio:rate${window}`;
}

/**
 * Multiwindow, multi-burn-rate alerts (Google SRE workbook, ch. 5) over a 30-day budget: the
 * long window says enough budget is gone to matter, the short one that it is still going, so
 * the alert resolves minutes after the errors stop. `for` as in the Kubernetes mixin's
 * KubeAPIErrorBudgetBurn: a single evaluation's blip does not page.
 */
export const BURN_RATE_ALERTS = [
  {
    kind: "ErrorBudgetFastBurn",
    burnRate: 14.4,
    longHours: 1,
    short: "5m",
    for: "2m",
    severity: SEVERITY.page,
    spends: "2% of a 30-day budget in 1h",
  },
  {
    kind: "ErrorBudgetSlowBurn",
    burnRate: 6,
    longHours: 6,
    short: "30m",
    for: "15m",
    severity: SEVERITY.ticket,
    spends: "5% of a 30-day budget in 6h",
  },
] as const;

/** Every window a burn-rate alert reads: each has its error ratio recorded. */
export const BURN_WINDOWS = BURN_RATE_ALERTS.flatMap((policy) => [policy.short, `${policy.longHours}h`]);

/** Too few calls for a ratio to mean anything: at 20 calls an hour, one failure is a 5% error rate. */
export const MIN_CALLS_PER_HOUR = 20;

const LATENCY_FOR = "5m";
const ERROR_WINDOW = "3m";

/** Label matchers added to a query, e.g. one ReplicaSet's pods: `{ rollouts_pod_template_hash: "…" }`. */
export type Matchers = Readonly<Record<string, string>>;

function selector(labels: Matchers, regexLabels: Matchers = {}, extra: Matchers = {}): string {
  const equal = (entries: Matchers) => Object.entries(entries).map(([k, v]) => `${k}="${v}"`);
  const matchers = [...equal(labels), ...Object.entries(regexLabels).map(([k, v]) => `${k}=~"${v}"`), ...equal(extra)];
  return `{${matchers.join(",")}}`;
}

/** The SLO of one unary method of a tool: the contract's numbers, or the deploy override's. */
export interface MethodSlo {
  readonly tool: string;
  readonly method: DescMethod;
  readonly p95TargetMs: number;
  readonly errorRateBudget: number;
  readonly timeoutMs: number;
  readonly source: string;
}

function sloOf(tool: string, method: DescMethod, overrides: SloOverrides): MethodSlo {
  const sla = methodPolicy(method).sla!;
  const override = overrides[`${tool}/${method.name}`] ?? {};
  if (sla.p95TargetMs === 0 && override.p95TargetMs === undefined)
    throw new Error(`${method.parent.typeName}.${method.name}: SLA has no p95_target_ms`);
  if (sla.errorRateBudget === 0 && override.errorRateBudget === undefined)
    throw new Error(`${method.parent.typeName}.${method.name}: SLA has no error_rate_budget`);
  const overridden = override.p95TargetMs !== undefined || override.errorRateBudget !== undefined;
  return {
    tool,
    method,
    p95TargetMs: override.p95TargetMs ?? sla.p95TargetMs,
    errorRateBudget: override.errorRateBudget ?? sla.errorRateBudget,
    timeoutMs: sla.timeoutMs,
    source: overridden ? "deploy override" : "from the contract",
  };
}

function unaryMethods(service: DescService): DescMethod[] {
  return service.methods.filter((m) => m.methodKind === "unary");
}

/** Every unary method's SLO; an override naming no unary method of these services is refused, so a typo cannot silently keep the old number. */
export function methodSlos(services: readonly DescService[], overrides: SloOverrides = {}): MethodSlo[] {
  const known = new Set(services.flatMap((s) => unaryMethods(s).map((m) => `${servicePolicy(s).toolName}/${m.name}`)));
  const unknown = Object.keys(overrides).filter((key) => !known.has(key));
  if (unknown.length > 0)
    throw new Error(`SLO overrides name no unary method of a tool service: ${unknown.join(", ")}`);
  return services.flatMap((s) => unaryMethods(s).map((m) => sloOf(servicePolicy(s).toolName, m, overrides)));
}

/**
 * p95 server latency in seconds per method, over 5 minutes: the recording rule's expression, and
 * (with `matchers` naming one ReplicaSet's pods) what a release's analysis measures.
 */
export function p95Expression(service: DescService, methods: readonly DescMethod[], matchers: Matchers = {}): string {
  const scope = selector(
    { grpc_service: service.typeName },
    { grpc_method: methods.map((m) => m.name).join("|") },
    matchers,
  );
  return `histogram_quantile(0.95, sum by (le, grpc_service, grpc_method) (rate(grpc_server_handling_seconds_bucket${scope}[5m])))`;
}

/** The share of calls per method that ended with a server-fault code over 3 minutes, like p95Expression. */
export function errorRatioExpression(
  service: DescService,
  methods: readonly DescMethod[],
  matchers: Matchers = {},
): string {
  return errorRatioOver(ERROR_WINDOW, service, methods, matchers);
}

function errorRatioOver(
  window: string,
  service: DescService,
  methods: readonly DescMethod[],
  matchers: Matchers = {},
): string {
  const names = methods.map((m) => m.name).join("|");
  const scope = selector({ grpc_service: service.typeName }, { grpc_method: names }, matchers);
  const faults = selector(
    { grpc_service: service.typeName },
    { grpc_method: names, grpc_code: SERVER_FAULT_CODES.join("|") },
    matchers,
  );
  const byMethod = "sum by (grpc_service, grpc_method)";
  const total = `${byMethod} (rate(grpc_server_handled_total${scope}[${window}]))`;
  // `or … * 0` makes the ratio 0 rather than absent while no call has failed.
  return `(\n  ${byMethod} (rate(grpc_server_handled_total${faults}[${window}]))\n  or\n  ${total} * 0\n)\n/\n${total}`;
}

/**
 * One recording rule per service and record name, over the contract's unary methods: several
 * rules writing the same series name with the same static labels would race (promtool rejects
 * them), and one rule per service is also fewer evaluations.
 */
function recordingRules(tool: string, service: DescService, methods: readonly DescMethod[]): Rule[] {
  return [
    { record: P95_RECORD, expr: p95Expression(service, methods), labels: { tool } },
    { record: ERROR_RATIO_RECORD, expr: errorRatioExpression(service, methods), labels: { tool } },
    ...BURN_WINDOWS.map((w) => ({
      record: errorRatioRecord(w),
      expr: errorRatioOver(w, service, methods),
      labels: { tool },
    })),
  ];
}

function burnRateAlert(slo: MethodSlo, policy: (typeof BURN_RATE_ALERTS)[number]): Rule {
  const { tool, method } = slo;
  const path = `${method.parent.typeName}/${method.name}`;
  const target = selector({ grpc_service: method.parent.typeName, grpc_method: method.name });
  const threshold = Number((policy.burnRate * slo.errorRateBudget).toPrecision(6));
  if (threshold >= 1) {
    throw new Error(
      `${tool}/${method.name}: an error budget of ${slo.errorRateBudget} cannot burn ${policy.burnRate}× (every call failing is slower), so ${policy.kind} could never fire`,
    );
  }
  const long = `${policy.longHours}h`;
  const calls = `sum by (grpc_service, grpc_method) (increase(grpc_server_handled_total${target}[${long}]))`;
  const codes = SERVER_FAULT_CODES.join(", ");
  return {
    alert: `${pascalCase(tool)}${method.name}${policy.kind}`,
    expr: [
      `${errorRatioRecord(long)}${target} > ${threshold}`,
      `and\n${errorRatioRecord(policy.short)}${target} > ${threshold}`,
      `and on (grpc_service, grpc_method)\n${calls} >= ${MIN_CALLS_PER_HOUR * policy.longHours}`,
    ].join("\n"),
    for: policy.for,
    labels: { severity: policy.severity, tool, method: method.name },
    annotations: {
      summary: `${tool} ${method.name} is spending its ${percent(slo.errorRateBudget)} error budget ${policy.burnRate}× too fast`,
      description:
        `{{ $value | humanizePercentage }} of ${path} calls over the last ${long} (and over ${policy.short}) ended with a ` +
        `server-side code (${codes}): above ${percent(threshold)}, ${policy.burnRate}× the budget, which spends ${policy.spends}. ` +
        `SLA: error rate <= ${percent(slo.errorRateBudget)} (${slo.source}).`,
      runbook_url: runbookUrl(`toolmethod${policy.kind.toLowerCase()}`),
    },
  };
}

function methodAlerts(slo: MethodSlo): Rule[] {
  const { tool, method } = slo;
  const target = selector({ grpc_service: method.parent.typeName, grpc_method: method.name });
  const alertPrefix = `${pascalCase(tool)}${method.name}`;
  const path = `${method.parent.typeName}/${method.name}`;
  const labels = { tool, method: method.name };
  return [
    {
      alert: `${alertPrefix}LatencyAboveSlo`,
      expr: `${P95_RECORD}${target} > ${slo.p95TargetMs / 1000}`,
      for: LATENCY_FOR,
      labels: { severity: SEVERITY.ticket, ...labels },
      annotations: {
        summary: `${tool} ${method.name} p95 latency is above its ${slo.p95TargetMs} ms target`,
        description:
          `p95 latency of ${path} has been above ${slo.p95TargetMs} ms for ${LATENCY_FOR} (now {{ $value | humanizeDuration }}). ` +
          `SLA: p95 <= ${slo.p95TargetMs} ms, timeout ${slo.timeoutMs} ms (${slo.source}).`,
        runbook_url: runbookUrl("toolmethodlatencyaboveslo"),
      },
    },
    ...BURN_RATE_ALERTS.map((policy) => burnRateAlert(slo, policy)),
    allCallsFailingAlert(slo.tool, slo.method),
  ];
}

/**
 * One rule group per tool service: recording rules first (a group evaluates in order, so its
 * alerts read this evaluation's values), then the method alerts, then the tool's Down alert.
 * Streaming methods are skipped: their duration is the stream's life, not a latency.
 */
export function sloRuleGroups(services: readonly DescService[], overrides: SloOverrides = {}): RuleFile {
  const slos = methodSlos(services, overrides);
  return {
    groups: services.map((service) => {
      const tool = servicePolicy(service).toolName;
      const unary = unaryMethods(service);
      return {
        name: `loopguard-slo-${tool}`,
        rules: [
          ...(unary.length > 0 ? recordingRules(tool, service, unary) : []),
          ...slos.filter((slo) => slo.method.parent === service).flatMap(methodAlerts),
          downAlert(tool),
        ],
      };
    }),
  };
}
