// The plain path's release gate over measurements that Prometheus answers or fails, one by one
// (runGate with a kubectl of the test's own): a gate passes only on three answers, never on
// Prometheus failing twice in a row, whatever the answers around those failures said.
import { describe, expect, it } from "vitest";
import { runGate } from "../src/ops/release/k8s-gate.js";
import type { GateStep } from "../src/ops/release/k8s.js";

type Measurement = "ok" | "over-budget" | "error";

const step = {
  action: "gate",
  description: "billing's gate",
  kind: "Job",
  name: "billing-smoke-preview-x",
  when: "before the flip",
  job: {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name: "billing-smoke-preview-x" },
    spec: { activeDeadlineSeconds: 180 },
  },
  queries: [
    { kind: "error-ratio", query: "ER" },
    { kind: "p95", query: "P95" },
  ],
  methods: [{ tool: "billing", method: "GetOrder", p95TargetMs: 150, errorRateBudget: 0.005 }],
  command: ["kubectl", "-n", "loopguard", "create", "-f", "-"],
  onFailure: [],
  undone: "",
} as unknown as GateStep;

/**
 * A kubectl whose Prometheus answers each measurement (both queries) as `answers` says, and then no
 * more (a Prometheus gone); the smoke Job succeeds.
 */
function kubectlAnswering(answers: readonly Measurement[]) {
  let measurement = -1;
  return async (args: readonly string[]): Promise<string> => {
    if (args[0] === "get" && args[1] === "--raw") {
      if (decodeURIComponent(args[2]!).endsWith("query=ER")) measurement += 1;
      const answer = answers[measurement] ?? "error";
      if (answer === "error") throw new Error("Error from server (ServiceUnavailable): no endpoints available");
      // A ratio to the target: 0.2 is well within it, 40 is forty times over.
      const value = answer === "over-budget" ? "40" : "0.2";
      return JSON.stringify({
        status: "success",
        data: { resultType: "vector", result: [{ metric: { grpc_method: "GetOrder" }, value: [0, value] }] },
      });
    }
    if (args.includes("job") && args.includes("get"))
      return JSON.stringify({ status: { conditions: [{ type: "Complete", status: "True" }] } });
    if (args.includes("logs")) return "smoke billing GetOrder: 0 of 400 calls failed";
    return "";
  };
}

async function gateOver(answers: readonly Measurement[], slept: number[] = []) {
  return runGate(step, {
    namespace: "loopguard",
    prometheus: "http://prometheus-operated.monitoring.svc:9090",
    kubectl: kubectlAnswering(answers),
    sleep: async (ms) => {
      slept.push(ms);
    },
    log: () => undefined,
  });
}

describe("the release gate's measurements", () => {
  // Past its list the fake Prometheus answers no more: the last two lists had fewer than three
  // measurements answered, and a gate does not pass on one answer.
  it.each<readonly Measurement[]>([
    ["error", "error", "ok"],
    ["ok", "error", "error"],
    ["over-budget", "error", "error"],
    ["error", "ok", "error"],
    ["over-budget", "error", "ok"],
  ])(
    "fails when Prometheus fails twice in a row, never passing on fewer than three answers: %j",
    async (...answers) => {
      const verdict = await gateOver(answers);
      expect(verdict.passed).toBe(false);
      expect(verdict.findings).toContainEqual(
        expect.stringMatching(/^Prometheus could not answer the gate queries 2 times in a row/),
      );
    },
  );

  it.each<readonly Measurement[]>([
    ["ok", "ok", "ok"],
    ["over-budget", "ok", "ok"],
    ["ok", "error", "ok", "ok"],
    ["error", "ok", "error", "ok", "ok"],
  ])("passes on three answers, one failure forgiven, each error measured again: %j", async (...answers) => {
    expect((await gateOver(answers)).passed).toBe(true);
  });

  it("fails on two measurements over the budget", async () => {
    expect((await gateOver(["over-budget", "ok", "over-budget"])).passed).toBe(false);
  });

  it("measures again, 10 s later, in place of a measurement Prometheus did not answer, and judges that answer", async () => {
    const slept: number[] = [];
    const verdict = await gateOver(["over-budget", "error", "ok", "over-budget"], slept);
    expect(verdict.passed).toBe(false);
    expect(verdict.findings).toContain("error-ratio failed 2 of its measurements (1 allowed)");
    // The initial delay, the interval after an answer, Argo's error retry after the one not answered.
    expect(slept).toEqual([75_000, 30_000, 10_000, 30_000]);
  });
});
