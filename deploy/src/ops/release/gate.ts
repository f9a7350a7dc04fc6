// The release gate's verdict, the same on every path: the answers to the gate queries
// (manifests/gate-queries.ts) — from Prometheus on Kubernetes, computed from the new pods' own /metrics pages
// locally (local-measure.ts) — hold one value per judged method, its measure over its target. The
// gate passes when each kind has at least one value and none is above 1 (what GATE_PASSES tells
// Argo Rollouts), and the smoke calls passed. Findings say, one line each, what was judged and why
// a release stops.
import { contractFiles } from "@loopguard/proto";
import {
  minCallsToJudge,
  type ServiceSpec,
  servicePolicy,
  type SmokeCall,
  smokeCallOf,
  type SmokeResult,
  smokePassed,
  toolServicesOf,
} from "@loopguard/tool-sdk";
import { serviceSlos } from "../../manifests/prometheus-files.js";
import type { MethodSlo } from "../../manifests/slo-rules.js";
import { ReleaseRefused } from "./contract-gate.js";
import type { GateKind } from "../../manifests/gate-queries.js";

/** What a release of a tool is judged by: its contract's smoke call, and its methods' SLOs (the deploy overrides applied). */
export interface ReleaseGate {
  readonly call: SmokeCall;
  readonly slos: readonly MethodSlo[];
}

export function releaseGateOf(root: string, services: readonly ServiceSpec[], tool: string): ReleaseGate {
  const service = toolServicesOf(contractFiles).find((s) => servicePolicy(s).toolName === tool);
  if (!service) throw new ReleaseRefused(`no contract serves the tool "${tool}"`);
  return {
    call: smokeCallOf(service),
    slos: serviceSlos(root, contractFiles, services).filter((slo) => slo.tool === tool),
  };
}

/** What the gate holds a method to: its SLO, by name (plain data, so a plan that carries it prints as JSON). */
export interface JudgedMethod {
  readonly tool: string;
  readonly method: string;
  readonly p95TargetMs: number;
  readonly errorRateBudget: number;
}

export function judgedMethods(slos: readonly MethodSlo[]): JudgedMethod[] {
  return slos.map((slo) => ({
    tool: slo.tool,
    method: slo.method.name,
    p95TargetMs: slo.p95TargetMs,
    errorRateBudget: slo.errorRateBudget,
  }));
}

/** One judged method's measure over its target (1 = at target). */
export interface JudgedValue {
  readonly method: string;
  readonly value: number;
}

export interface GateAnswer {
  readonly kind: GateKind;
  readonly values: readonly JudgedValue[];
  /** What makes the answer no evidence of health, whatever its values (locally: a pod that restarted in the window). */
  readonly problems?: readonly string[];
}

export interface GateVerdict {
  readonly passed: boolean;
  /** One line per judged method and kind, then what failed; the first failing line says why the release stops. */
  readonly findings: readonly string[];
}

function percent(fraction: number): string {
  return `${Number((fraction * 100).toPrecision(3))} %`;
}

function described(kind: GateKind, slo: JudgedMethod, value: number): string {
  const what = `${slo.tool} ${slo.method}`;
  if (kind === "p95")
    return `${what} p95 ${Number.isNaN(value) ? "NaN" : `${Math.round(value * slo.p95TargetMs)} ms`} (target ${slo.p95TargetMs} ms)`;
  return `${what} error ratio ${Number.isNaN(value) ? "NaN" : percent(value * slo.errorRateBudget)} (budget ${percent(slo.errorRateBudget)})`;
}

/** Judges the answers to the gate queries of one tool (each kind answered), and its smoke calls when they are given. */
export function gateVerdict(
  slos: readonly JudgedMethod[],
  answers: readonly GateAnswer[],
  smoke?: { readonly result: SmokeResult; readonly errorBudget: number; readonly line: string },
): GateVerdict {
  const failures: string[] = [];
  const judged: string[] = [];
  if (smoke) (smokePassed(smoke.result, smoke.errorBudget) ? judged : failures).push(smoke.line);
  for (const { kind, values, problems = [] } of answers) {
    failures.push(...problems);
    if (values.length === 0) {
      const needs = slos.map((s) => `${s.method} ${minCallsToJudge(s.errorRateBudget)}`).join(", ");
      failures.push(
        `no method of ${slos[0]?.tool ?? "the tool"} had the calls to judge its ${kind === "p95" ? "p95" : "error ratio"} on (${needs}): no evidence is no pass`,
      );
    }
    for (const { method, value } of values) {
      const slo = slos.find((s) => s.method === method);
      if (!slo) throw new Error(`the gate's answer names ${method}, which has no SLO here`);
      const line = described(kind, slo, value);
      judged.push(line);
      // A negative measure (counters subtracted across a reset) or a non-finite one is no evidence, not a pass.
      if (!(value >= 0 && value <= 1))
        failures.push(
          `${line}: ${Number.isNaN(value) || value < 0 ? "not a measure" : kind === "p95" ? "above its target" : "above its budget"}`,
        );
    }
  }
  return { passed: failures.length === 0, findings: [...failures, ...judged] };
}

/** A Prometheus instant-query answer (/api/v1/query) to a gate query, as the values it holds. */
export function prometheusAnswer(kind: GateKind, body: unknown): GateAnswer {
  const answer = body as {
    status?: string;
    error?: string;
    data?: { resultType?: string; result?: { metric?: Record<string, string>; value?: [number, string] }[] };
  };
  if (answer?.status !== "success")
    throw new Error(`Prometheus refused the ${kind} gate query: ${answer?.error ?? "no answer"}`);
  if (answer.data?.resultType !== "vector" || !Array.isArray(answer.data.result))
    throw new Error(
      `Prometheus answered the ${kind} gate query with a ${answer.data?.resultType ?? "missing"} result, not a vector`,
    );
  return {
    kind,
    values: answer.data.result.map((sample) => ({
      method: sample.metric?.grpc_method ?? "",
      value: Number(sample.value?.[1]),
    })),
  };
}
