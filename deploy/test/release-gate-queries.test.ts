import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { describe, expect, it } from "vitest";
import { type GateKind, gateQueries } from "../src/manifests/gate-queries.js";
import { gateVerdict, judgedMethods } from "../src/ops/release/gate.js";
import { bucketQuantile } from "../src/ops/release/local-measure.js";
import { methodSlos } from "../src/manifests/slo-rules.js";
import { findExecutable, promtoolTestRules } from "./promtool.js";

const promtool = findExecutable("promtool");
if (!promtool)
  console.warn(
    "skipping the gate query evaluation: promtool not found on PATH (install the Debian package `prometheus`)",
  );

const slos = methodSlos([BillingService]);
const SERVICE = BillingService.typeName;
const FAST = new Map([
  [0.005, 50],
  [0.01, 90],
  [0.025, 100],
  [Infinity, 100],
]);
const SLOW = new Map([
  [0.1, 50],
  [0.25, 100],
  [Infinity, 100],
]);

/** A version's pods: calls per minute of GetOrder by code, and the cumulative latency buckets per minute. */
interface Version {
  readonly name: string;
  readonly perMinute: Readonly<Record<string, number>>;
  readonly buckets: ReadonlyMap<number, number>;
}

function series(version: Version): { series: string; values: string }[] {
  const labels = (extra: string) =>
    `{grpc_type="unary",grpc_service="${SERVICE}",grpc_method="GetOrder",version="${version.name}"${extra}}`;
  return [
    ...Object.entries(version.perMinute).map(([code, n]) => ({
      series: `grpc_server_handled_total${labels(`,grpc_code="${code}"`)}`,
      values: `0+${n}x10`,
    })),
    ...[...version.buckets].map(([le, n]) => ({
      series: `grpc_server_handling_seconds_bucket${labels(`,grpc_code="OK",le="${le === Infinity ? "+Inf" : le}"`)}`,
      values: `0+${n}x10`,
    })),
  ];
}

const rounded = (value: number) => Math.round(value * 1000) / 1000;

function expectation(version: string, kind: GateKind, values: readonly number[]) {
  const query = gateQueries(slos, { version }).find((q) => q.kind === kind)!.query;
  return {
    expr: `round(${query}, 0.001)`,
    eval_time: "10m",
    exp_samples: values.map((value) => ({ labels: `{grpc_service="${SERVICE}",grpc_method="GetOrder"}`, value })),
  };
}

describe("the gate queries", () => {
  it("judge only methods with at least their minimum of calls, as measure over target, joined by or", () => {
    const [errors, p95] = gateQueries(slos, { version: "green" });
    expect(errors!.kind).toBe("error-ratio");
    expect(errors!.query.split("\nor\n")).toHaveLength(slos.length);
    expect(errors!.query).toContain(
      ') / 0.005\nand on (grpc_service, grpc_method)\nsum by (grpc_service, grpc_method) (increase(grpc_server_handled_total{grpc_service="loopguard.billing.v1.BillingService",grpc_method="GetOrder",version="green"}[3m])) >= 200',
    );
    expect(p95!.query).toContain(") / 0.15\nand on (grpc_service, grpc_method)");
    expect(p95!.query).toContain("[5m])) >= 200");
    expect(() => gateQueries([], {})).toThrow(/at least one method/);
  });

  it.skipIf(!promtool)(
    "are evaluated by Prometheus: good passes, 30 % errors and a slow p95 fail, too few calls and no series answer nothing",
    () => {
      const good: Version = { name: "good", perMinute: { OK: 100 }, buckets: FAST };
      const bad: Version = { name: "bad", perMinute: { OK: 70, UNAVAILABLE: 30 }, buckets: FAST };
      const slow: Version = { name: "slow", perMinute: { OK: 100 }, buckets: SLOW };
      const few: Version = { name: "few", perMinute: { OK: 10 }, buckets: FAST };
      // Caller mistakes spend no budget: NOT_FOUND is not a server fault.
      const notFound: Version = { name: "not-found", perMinute: { OK: 60, NOT_FOUND: 40 }, buckets: FAST };
      const fastP95 = rounded(bucketQuantile(0.95, FAST) / 0.15);
      const slowP95 = rounded(bucketQuantile(0.95, SLOW) / 0.15);
      expect([fastP95, slowP95]).toEqual([0.117, 1.567]);
      const tests = {
        rule_files: [],
        evaluation_interval: "1m",
        tests: [
          {
            interval: "1m",
            input_series: [good, bad, slow, few, notFound].flatMap(series),
            promql_expr_test: [
              expectation("good", "error-ratio", [0]),
              expectation("good", "p95", [fastP95]),
              expectation("bad", "error-ratio", [60]),
              expectation("bad", "p95", [fastP95]),
              expectation("slow", "error-ratio", [0]),
              expectation("slow", "p95", [slowP95]),
              expectation("few", "error-ratio", []),
              expectation("few", "p95", []),
              expectation("absent", "error-ratio", []),
              expectation("not-found", "error-ratio", [0]),
            ],
          },
        ],
      };
      const { output, status } = promtoolTestRules(promtool!, tests);
      expect(output).toContain("SUCCESS");
      expect(status).toBe(0);
      // What each answer means to the gate.
      const verdict = (errors: number[], p95s: number[]) =>
        gateVerdict(judgedMethods(slos), [
          { kind: "error-ratio", values: errors.map((value) => ({ method: "GetOrder", value })) },
          { kind: "p95", values: p95s.map((value) => ({ method: "GetOrder", value })) },
        ]);
      expect(verdict([0], [fastP95]).passed).toBe(true);
      expect(verdict([60], [fastP95]).findings[0]).toBe(
        "billing GetOrder error ratio 30 % (budget 0.5 %): above its budget",
      );
      expect(verdict([0], [slowP95]).findings[0]).toBe("billing GetOrder p95 235 ms (target 150 ms): above its target");
      expect(verdict([], []).findings[0]).toBe(
        "no method of billing had the calls to judge its error ratio on (GetOrder 200, Refund 200, ListRefunds 200): no evidence is no pass",
      );
    },
  );
});
