// Prometheus SLO rules derived from the contracts: every unary method's SLA option
// (p95_target_ms, error_rate_budget) becomes a latency and an error-budget alert over the
// standard gRPC server metrics, and every tool gets a scrape-failure alert. Deploy config may
// override the numbers per method; the contract stays the default.
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { methodPolicy, servicePolicy } from "@loopguard/tool-sdk";
import type { YamlValue } from "./yaml.js";

export const P95_RECORD = "loopguard:grpc_server_p95_seconds:5m";
export const ERROR_RATIO_RECORD = "loopguard:grpc_server_error_ratio:rate3m";

/**
 * Codes that mean the server failed, so they spend the error budget. Caller mistakes
 * (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION, …) and load shedding
 * (RESOURCE_EXHAUSTED, answered with RetryInfo) do not.
 */
export const SERVER_FAULT_CODES = ["UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"] as const;

const LATENCY_FOR = "5m";
const ERROR_WINDOW = "3m";
const DOWN_FOR = "1m";

export interface SloOverride {
  readonly p95TargetMs?: number;
  readonly errorRateBudget?: number;
}

/** Keyed "tool/Method", e.g. "kb-search/Search". */
export type SloOverrides = Readonly<Record<string, SloOverride>>;

export type Rule = { readonly [key: string]: YamlValue };

export type RuleGroup = { readonly name: string; readonly rules: readonly Rule[] };

export type RuleFile = { readonly groups: readonly RuleGroup[] };

/** Validates an overrides document (parsed JSON) so that a typo fails the generator, not the page. */
export function parseSloOverrides(document: unknown, source = "SLO overrides"): SloOverrides {
  if (typeof document !== "object" || document === null || Array.isArray(document)) {
    throw new Error(`${source}: expected an object keyed "tool/Method"`);
  }
  const overrides: Record<string, SloOverride> = {};
  for (const [key, value] of Object.entries(document)) {
    if (!/^[a-z][a-z0-9-]*\/[A-Z][A-Za-z0-9]*$/.test(key)) throw new Error(`${source}: key "${key}" is not "tool/Method"`);
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error(`${source}: "${key}" must be an object`);
    const { p95TargetMs, errorRateBudget, ...unknown } = value as Record<string, unknown>;
    const extra = Object.keys(unknown);
    if (extra.length > 0) throw new Error(`${source}: "${key}" has unknown fields ${extra.join(", ")} (allowed: p95TargetMs, errorRateBudget)`);
    if (p95TargetMs !== undefined && (typeof p95TargetMs !== "number" || !Number.isInteger(p95TargetMs) || p95TargetMs <= 0)) {
      throw new Error(`${source}: "${key}".p95TargetMs must be a positive integer`);
    }
    if (errorRateBudget !== undefined && (typeof errorRateBudget !== "number" || !(errorRateBudget > 0 && errorRateBudget < 1))) {
      throw new Error(`${source}: "${key}".errorRateBudget must be a number between 0 and 1 (exclusive)`);
    }
    overrides[key] = {
      ...(p95TargetMs === undefined ? {} : { p95TargetMs }),
      ...(errorRateBudget === undefined ? {} : { errorRateBudget }),
    };
  }
  return overrides;
}

/** "kb-search" → "KbSearch", the prefix of alert names. */
export function pascalCase(toolName: string): string {
  return toolName
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((part) => part[0]!.toUpperCase() + part.slice(1))
    .join("");
}

/** Label matchers added to a query, e.g. one ReplicaSet's pods: `{ rollouts_pod_template_hash: "…" }`. */
export type Matchers = Readonly<Record<string, string>>;

function selector(labels: Matchers, regexLabels: Matchers = {}, extra: Matchers = {}): string {
  const equal = (entries: Matchers) => Object.entries(entries).map(([k, v]) => `${k}="${v}"`);
  const matchers = [...equal(labels), ...Object.entries(regexLabels).map(([k, v]) => `${k}=~"${v}"`), ...equal(extra)];
  return `{${matchers.join(",")}}`;
}

function percent(fraction: number): string {
  return `${Number((fraction * 100).toPrecision(6))}%`;
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
  if (sla.p95TargetMs === 0 && override.p95TargetMs === undefined) throw new Error(`${method.parent.typeName}.${method.name}: SLA has no p95_target_ms`);
  if (sla.errorRateBudget === 0 && override.errorRateBudget === undefined) throw new Error(`${method.parent.typeName}.${method.name}: SLA has no error_rate_budget`);
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
  if (unknown.length > 0) throw new Error(`SLO overrides name no unary method of a tool service: ${unknown.join(", ")}`);
  return services.flatMap((s) => unaryMethods(s).map((m) => sloOf(servicePolicy(s).toolName, m, overrides)));
}

/**
 * p95 server latency in seconds per method, over 5 minutes: the recording rule's expression, and
 * (with `matchers` naming one ReplicaSet's pods) what a release's analysis measures.
 */
export function p95Expression(service: DescService, methods: readonly DescMethod[], matchers: Matchers = {}): string {
  const scope = selector({ grpc_service: service.typeName }, { grpc_method: methods.map((m) => m.name).join("|") }, matchers);
  return `histogram_quantile(0.95, sum by (le, grpc_service, grpc_method) (rate(grpc_server_handling_seconds_bucket${scope}[5m])))`;
}

/** The share of calls per method that ended with a server-fault code over 3 minutes, like p95Expression. */
export function errorRatioExpression(service: DescService, methods: readonly DescMethod[], matchers: Matchers = {}): string {
  const names = methods.map((m) => m.name).join("|");
  const scope = selector({ grpc_service: service.typeName }, { grpc_method: names }, matchers);
  const faults = selector({ grpc_service: service.typeName }, { grpc_method: names, grpc_code: SERVER_FAULT_CODES.join("|") }, matchers);
  const byMethod = "sum by (grpc_service, grpc_method)";
  const total = `${byMethod} (rate(grpc_server_handled_total${scope}[${ERROR_WINDOW}]))`;
  // `or … * 0` makes the ratio 0 rather than absent while no call has failed.
  return `(\n  ${byMethod} (rate(grpc_server_handled_total${faults}[${ERROR_WINDOW}]))\n  or\n  ${total} * 0\n)\n/\n${total}`;
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
  ];
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
      labels: { severity: "warning", ...labels },
      annotations: {
        summary: `${tool} ${method.name} p95 latency is above its ${slo.p95TargetMs} ms target`,
        description:
          `p95 latency of ${path} has been above ${slo.p95TargetMs} ms for ${LATENCY_FOR} (now {{ $value | humanizeDuration }}). ` +
          `SLA: p95 <= ${slo.p95TargetMs} ms, timeout ${slo.timeoutMs} ms (${slo.source}).`,
      },
    },
    {
      alert: `${alertPrefix}ErrorBudgetBurn`,
      expr: `${ERROR_RATIO_RECORD}${target} > ${slo.errorRateBudget}`,
      for: ERROR_WINDOW,
      labels: { severity: "critical", ...labels },
      annotations: {
        summary: `${tool} ${method.name} server errors exceed the ${percent(slo.errorRateBudget)} error budget`,
        description:
          `{{ $value | humanizePercentage }} of ${path} calls over the last ${ERROR_WINDOW} ended with a server-side code ` +
          `(${SERVER_FAULT_CODES.join(", ")}). SLA: error rate <= ${percent(slo.errorRateBudget)} (${slo.source}).`,
      },
    },
  ];
}

function downAlert(tool: string): Rule {
  return {
    alert: `${pascalCase(tool)}Down`,
    expr: `up${selector({ job: tool })} == 0`,
    for: DOWN_FOR,
    labels: { severity: "critical", tool },
    annotations: {
      summary: `${tool} is down`,
      description: `Prometheus has not been able to scrape ${tool} at {{ $labels.instance }} for ${DOWN_FOR}.`,
    },
  };
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
        rules: [...(unary.length > 0 ? recordingRules(tool, service, unary) : []), ...slos.filter((slo) => slo.method.parent === service).flatMap(methodAlerts), downAlert(tool)],
      };
    }),
  };
}
