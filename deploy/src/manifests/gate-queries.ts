// The release gate's SLO queries: for one tool, measured on one set of its pods (an Argo
// ReplicaSet's hash, a plain-blue-green colour), each unary method's error ratio and p95 — the
// recording rules' own expressions (slo-rules.ts) — divided by the contract's target, so 1 is
// "at target", and kept only for methods with enough calls in the window to say anything
// (minCallsToJudge: at least 1 / budget, so one failed call cannot spend the whole budget). The
// answer is one value per judged method; the gate passes when there is at least one and none is
// above 1. An empty answer (no method had enough calls: the smoke calls did not arrive, or
// nothing is scraped) and NaN never pass. Argo Rollouts evaluates GATE_PASSES on the answer; the
// kubectl path asks Prometheus the same queries and judges them with gateVerdict (gate.ts).
import type { DescMethod } from "@bufbuild/protobuf";
import { minCallsToJudge } from "@loopguard/tool-sdk";
import { errorRatioExpression, type Matchers, type MethodSlo, p95Expression } from "./slo-rules.js";

/** The windows of the recording rules' expressions (slo-rules.ts): the calls a method is judged on are counted over the same. */
const WINDOWS = { "error-ratio": "3m", p95: "5m" } as const;

export type GateKind = keyof typeof WINDOWS;
export const GATE_KINDS = Object.keys(WINDOWS) as GateKind[];

/** Argo Rollouts' successCondition on a gate query's answer (a list of numbers): an empty list or a NaN fails. */
export const GATE_PASSES = "len(result) > 0 && all(result, {# <= 1})";

export interface GateQuery {
  readonly kind: GateKind;
  readonly query: string;
}

function selector(method: DescMethod, matchers: Matchers): string {
  const labels = { grpc_service: method.parent.typeName, grpc_method: method.name, ...matchers };
  return `{${Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(",")}}`;
}

/** The method's measure over its target, only while the window holds at least the calls it is judged on. */
function judgedTerm(kind: GateKind, slo: MethodSlo, matchers: Matchers): string {
  const measure =
    kind === "p95"
      ? p95Expression(slo.method.parent, [slo.method], matchers)
      : errorRatioExpression(slo.method.parent, [slo.method], matchers);
  const target = kind === "p95" ? slo.p95TargetMs / 1000 : slo.errorRateBudget;
  const calls = `sum by (grpc_service, grpc_method) (increase(grpc_server_handled_total${selector(slo.method, matchers)}[${WINDOWS[kind]}]))`;
  return `(\n(\n${measure}\n) / ${target}\nand on (grpc_service, grpc_method)\n${calls} >= ${minCallsToJudge(slo.errorRateBudget)}\n)`;
}

/** The gate's queries over one tool's unary methods, measured on the pods `matchers` select. */
export function gateQueries(slos: readonly MethodSlo[], matchers: Matchers): GateQuery[] {
  if (slos.length === 0) throw new Error("a release gate needs at least one method's SLO");
  return GATE_KINDS.map((kind) => ({ kind, query: slos.map((slo) => judgedTerm(kind, slo, matchers)).join("\nor\n") }));
}
