import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { gateQueries } from "../src/manifests/gate-queries.js";
import { COMPONENTS_DIR, OVERLAYS_DIR } from "../src/manifests/generated-components.js";
import { COLOUR_LABEL, RELEASE_LABEL, RELEASE_SERIES_LABEL } from "../src/manifests/release-objects.js";
import { type K8sObject, renderOnProd } from "../src/manifests/renderings.js";
import { releaseGateOf } from "../src/ops/release/gate.js";
import { type GateStep, type PatchStep, planK8sRelease } from "../src/ops/release/k8s.js";
import { findExecutable, promtoolTestRules } from "./promtool.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));
const billing = services.find((s) => s.name === "billing")!;
const gate = releaseGateOf(root, services, "billing");
const SERVICE = "loopguard.billing.v1.BillingService";
const promtool = findExecutable("promtool");

let objects: K8sObject[];
beforeAll(() => {
  objects = renderOnProd(join(root, OVERLAYS_DIR), join(root, COMPONENTS_DIR), ["plain-blue-green"]).objects.filter(
    (o) => o.metadata.labels?.["app.kubernetes.io/name"] === "billing",
  );
}, 60_000);

/** A gated release of billing v2 into green; its new pods' label, and its gate steps. */
function released(): { release: string; gates: GateStep[] } {
  const plan = planK8sRelease({ objects, spec: billing, namespace: "loopguard", kind: "release", tag: "v2", gate });
  const green = plan.steps.find((s): s is PatchStep => s.action === "patch" && s.name === "billing-green")!;
  const labels = (green.result as K8sObject & Deployment).spec!.template.metadata!.labels!;
  return { release: labels[RELEASE_LABEL]!, gates: plan.steps.filter((s): s is GateStep => s.action === "gate") };
}

/** Series of GetOrder calls per minute by code, from `from` minutes on for `minutes` minutes (then gone). */
function calls(labels: Record<string, string>, perMinute: Record<string, number>, from: number, minutes: number) {
  const own = Object.entries(labels)
    .map(([k, v]) => `,${k}="${v}"`)
    .join("");
  return Object.entries(perMinute).map(([code, n]) => ({
    series: `grpc_server_handled_total{grpc_type="unary",grpc_service="${SERVICE}",grpc_method="GetOrder",grpc_code="${code}"${own}}`,
    values: `${from > 0 ? `_x${from} ` : ""}0+${n}x${minutes}`,
  }));
}

describe("the plain path's release gate", () => {
  it("labels the new colour's pods with the release's own value, and selects that label in both gates", () => {
    const { release, gates } = released();
    expect(release).toMatch(/^[a-z0-9]+$/);
    expect(gates.map((g) => g.when)).toEqual(["before the flip", "after the flip"]);
    for (const g of gates) {
      for (const q of g.queries)
        expect(q.query).toContain(`${COLOUR_LABEL}="green",${RELEASE_SERIES_LABEL}="${release}"`);
      expect(g.description).toContain(`this release's green pods (${RELEASE_SERIES_LABEL}="${release}")`);
    }
  }, 60_000);

  it.skipIf(!promtool)(
    "fails new pods failing 3 % of their calls while the colour's previous pods, drained 2 minutes ago, are still in the window",
    () => {
      const { release, gates } = released();
      const errorRatio = gates[0]!.queries.find((q) => q.kind === "error-ratio")!.query;
      const colourOnly = gateQueries(gate.slos, { [COLOUR_LABEL]: "green" }).find(
        (q) => q.kind === "error-ratio",
      )!.query;
      const tests = {
        rule_files: [],
        evaluation_interval: "1m",
        tests: [
          {
            interval: "1m",
            input_series: [
              // The previous green pods: live traffic until they were drained at minute 5.
              ...calls({ [COLOUR_LABEL]: "green", [RELEASE_SERIES_LABEL]: "earlier" }, { OK: 2000 }, 0, 5),
              // Pods labelled before releases labelled them are not this release's either.
              ...calls({ [COLOUR_LABEL]: "green" }, { OK: 2000 }, 0, 5),
              // This release's green pods from minute 4: the smoke calls, 3 % of them failing.
              ...calls({ [COLOUR_LABEL]: "green", [RELEASE_SERIES_LABEL]: release }, { OK: 97, UNAVAILABLE: 3 }, 4, 6),
            ],
            promql_expr_test: [
              {
                // What the gate judges: the new pods alone, 3 % over a 0.5 % budget.
                expr: `round(${errorRatio}, 0.001)`,
                eval_time: "7m",
                exp_samples: [{ labels: `{grpc_service="${SERVICE}",grpc_method="GetOrder"}`, value: 6 }],
              },
              {
                // The colour alone sums the drained pods' calls in: within budget, a pass.
                expr: `count((${colourOnly}) <= 1)`,
                eval_time: "7m",
                exp_samples: [{ labels: "{}", value: 1 }],
              },
            ],
          },
        ],
      };
      const { output, status } = promtoolTestRules(promtool!, tests);
      expect(output).toContain("SUCCESS");
      expect(status).toBe(0);
    },
    60_000,
  );
});
