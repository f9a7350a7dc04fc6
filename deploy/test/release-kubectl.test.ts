// `pnpm release --k8s` applied to a recording kubectl (test/fake-kubectl.mjs on PATH, answering
// from fixtures: Prometheus answers recorded from a real Prometheus by release-gate.int.test.ts),
// as no cluster runs here. Plain path: a good version passes both gates and is released; a version
// Prometheus judges bad, or nothing judges at all, or whose smoke Job fails, is undone before the
// flip; one that fails after the flip, or whose gate or autoscaler patch after the flip cannot
// run (the API server refuses it), is flipped back, and says what is live. Argo: an aborted Rollout, or one paused on
// an inconclusive analysis, gets its stable image back. What is asserted is what kubectl was told.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, renderOnProd, type Rendering } from "../src/manifests/renderings.js";
import { COMPONENTS_DIR, OVERLAYS_DIR } from "../src/manifests/generated-components.js";
import { ReleaseRefused } from "../src/ops/release/contract-gate.js";
import { releaseGateOf } from "../src/ops/release/gate.js";
import { planK8sRelease } from "../src/ops/release/k8s.js";
import { applyK8sPlan } from "../src/ops/release/k8s-apply.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
const services = discoverServices(join(root, "services"));
const billing = services.find((s) => s.name === "billing")!;
const gate = releaseGateOf(root, services, "billing");
const NEW = "registry.example.com/loopguard/billing:v2";
const LIVE = "registry.example.com/loopguard/billing:unset";

let plain: Rendering;
let argo: Rendering;
let fake: string;
const path = process.env.PATH;

beforeAll(() => {
  // Rendered with the real kubectl, before the fake goes on PATH.
  plain = renderOnProd(join(root, OVERLAYS_DIR), join(root, COMPONENTS_DIR), ["plain-blue-green"]);
  argo = renderOnProd(join(root, OVERLAYS_DIR), join(root, COMPONENTS_DIR), ["argo-rollouts"]);
  fake = mkdtempSync(join(tmpdir(), "loopguard-fake-kubectl-"));
  writeFileSync(
    join(fake, "kubectl"),
    `#!/bin/sh\nexec "${process.execPath}" "${join(here, "fake-kubectl.mjs")}" "$@"\n`,
  );
  chmodSync(join(fake, "kubectl"), 0o755);
  process.env.PATH = `${fake}${delimiter}${path}`;
  process.env.FAKE_KUBECTL_DIR = fake;
}, 60_000);

afterAll(() => {
  process.env.PATH = path;
  rmSync(fake, { recursive: true, force: true });
});

afterEach(() => rmSync(join(fake, "calls.jsonl"), { force: true }));

interface Scenario {
  readonly prometheus?: readonly ("good" | "bad" | "empty" | "error")[];
  readonly jobs?: readonly ("Complete" | "Failed")[];
  readonly rollout?: object;
  /** The migrate Job's outcome (Complete unless told). */
  readonly migration?: "Complete" | "Failed";
  /** What the API server refuses: "create <Job name>" or "patch <kind>/<name>" prefixes. */
  readonly refuse?: readonly string[];
}

interface Call {
  readonly args: string[];
  readonly stdin: string;
}

/** Applies a release of billing v2 against the fake; returns what kubectl was told and how the release ended. */
async function release(
  rendering: Rendering,
  scenario: Scenario,
): Promise<{ calls: Call[]; outcome: Error | undefined; log: string[] }> {
  writeFileSync(
    join(fake, "scenario.json"),
    JSON.stringify({ fixtures: join(here, "fixtures", "prometheus"), prometheus: [], jobs: [], ...scenario }),
  );
  writeFileSync(join(fake, "calls.jsonl"), "");
  const objects = rendering.objects.filter(
    (o: K8sObject) => o.metadata.labels?.["app.kubernetes.io/name"] === "billing",
  );
  const plan = planK8sRelease({ objects, spec: billing, namespace: "loopguard", kind: "release", tag: "v2", gate });
  const log: string[] = [];
  const outcome = await applyK8sPlan(plan, (line) => log.push(line), { sleep: async () => undefined }).then(
    () => undefined,
    (error: Error) => error,
  );
  const calls = readFileSync(join(fake, "calls.jsonl"), "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Call);
  return { calls, outcome, log };
}

/** Each patch as "kind/name path=value" lines, each smoke Job and gate query by what it is. */
function told(calls: readonly Call[]): string[] {
  return calls.flatMap((call) => {
    const at = call.args.indexOf("patch");
    if (at >= 0) {
      const ops = JSON.parse(call.args.at(-1)!) as { op: string; path: string; value?: unknown }[];
      return ops
        .filter((o) => o.op !== "test")
        .map(
          (o) =>
            `patch ${call.args[at + 1]}/${call.args[at + 2]} ${o.path}=${o.path.endsWith("loopguard~1release") ? "<release>" : JSON.stringify(o.value)}`,
        );
    }
    if (call.args.includes("create"))
      return [`create ${JSON.parse(call.stdin).metadata.name.replace(/-[a-z0-9]+$/, "")}`];
    if (call.args.includes("--raw"))
      return [
        new URL(`http://x${call.args.at(-1)}`).searchParams.get("query")!.includes("histogram_quantile")
          ? "query p95"
          : "query error-ratio",
      ];
    return [];
  });
}

const QUERIES = ["query error-ratio", "query p95"];
/**
 * The new image's migrate Job, then green gets the new image, its release's own pod label and
 * blue's replicas, then the first smoke Job goes through the preview.
 */
const UP_TO_THE_GATE = [
  "create billing-migrate",
  `patch deployment/billing-green /spec/template/spec/containers/0/image="${NEW}"`,
  "patch deployment/billing-green /spec/template/metadata/labels/loopguard~1release=<release>",
  "patch deployment/billing-green /spec/replicas=2",
  "create billing-smoke-preview",
];

describe("pnpm release --k8s, plain path, against a recording kubectl", () => {
  it("stops before any pod of the new image starts when its migration Job fails, and says where to look", async () => {
    const { calls, outcome } = await release(plain, { migration: "Failed" });
    expect(told(calls)).toEqual(["create billing-migrate"]);
    expect(outcome).toBeInstanceOf(ReleaseRefused);
    expect(outcome!.message).toMatch(
      /^the migration step failed \(Job billing-migrate-[a-z0-9]+: Job has reached the specified backoff limit\); its transaction rolled back, no pod of the new image started and the live pods keep serving: `kubectl -n loopguard logs job\/billing-migrate-[a-z0-9]+` says why$/,
    );
  });

  it("a good version passes the gate before and after the flip: smoke Jobs through the preview, then the live Service, and the queries on green", async () => {
    const { calls, outcome } = await release(plain, { prometheus: ["good", "good"], jobs: ["Complete", "Complete"] });
    expect(outcome).toBeUndefined();
    expect(told(calls)).toEqual([
      ...UP_TO_THE_GATE,
      ...QUERIES,
      ...QUERIES,
      ...QUERIES,
      'patch service/billing /spec/selector/version="green"',
      'patch service/billing-preview /spec/selector/version="blue"',
      'patch horizontalpodautoscaler/billing /spec/scaleTargetRef/name="billing-green"',
      "create billing-smoke-live",
      ...QUERIES,
      ...QUERIES,
      ...QUERIES,
      "patch deployment/billing-blue /spec/replicas=0",
    ]);
    const [migrate, preview, live] = calls
      .filter((c) => c.args.includes("create"))
      .map(
        (c) =>
          JSON.parse(c.stdin) as { spec: { template: { spec: { containers: { image: string; args: string[] }[] } } } },
      );
    expect(migrate!.spec.template.spec.containers[0]).toMatchObject({ image: NEW, args: ["migrate"] });
    expect(preview!.spec.template.spec.containers[0]).toMatchObject({
      image: NEW,
      args: expect.arrayContaining(["--target", "billing-preview:50062"]),
    });
    expect(live!.spec.template.spec.containers[0]!.args).toEqual(expect.arrayContaining(["--target", "billing:50062"]));
    const query = calls.find((c) => c.args.includes("--raw"))!.args.at(-1)!;
    expect(query).toMatch(
      /^\/api\/v1\/namespaces\/monitoring\/services\/http:prometheus-operated:9090\/proxy\/api\/v1\/query\?query=/,
    );
    // The pods this release started, by the label it gave them: not the ones green ran before.
    const ownLabel = JSON.parse(calls.find((c) => c.args.includes("billing-green"))!.args.at(-1)!).find(
      (o: { path: string }) => o.path.endsWith("loopguard~1release"),
    ).value;
    expect(decodeURIComponent(query)).toContain(
      `grpc_method="GetOrder",version="green",loopguard_release="${ownLabel}"}[3m])) >= 200`,
    );
  });

  it("a version failing 30 % of its calls is stopped before the flip: green back to zero pods, blue never left", async () => {
    const { calls, outcome, log } = await release(plain, { prometheus: ["bad"], jobs: ["Failed"] });
    expect(outcome).toBeInstanceOf(ReleaseRefused);
    expect(outcome!.message).toBe(
      `${NEW} failed the release gate before the flip: smoke Job ${JSON.parse(calls.find((c) => c.args.includes("create") && c.stdin.includes("smoke-check"))!.stdin).metadata.name} failed: smoke billing GetOrder: 131 of 400 calls failed (UNAVAILABLE × 131), 6 allowed at a 0.5 % error rate; p95 2.8 ms → billing-preview:50062; billing-green is scaled back to zero and billing-blue stays live`,
    );
    expect((outcome as ReleaseRefused).detail).toMatch(
      /^billing GetOrder error ratio 32\.8 % \(budget 0\.5 %\): above its budget\nerror-ratio failed 2 of its measurements \(1 allowed\)/,
    );
    // Two failed measurements of three are enough to stop.
    expect(told(calls)).toEqual([
      ...UP_TO_THE_GATE,
      ...QUERIES,
      ...QUERIES,
      "patch deployment/billing-green /spec/replicas=0",
    ]);
    expect(log).toContain("  undo: scale billing-green back to zero: it failed the gate");
  });

  it("no answer is no pass: an empty answer, or Prometheus failing twice in a row, stops the release before the flip", async () => {
    const empty = await release(plain, { prometheus: ["empty"], jobs: ["Complete"] });
    expect(empty.outcome!.message).toMatch(
      /^registry\S+ failed the release gate before the flip: no method of billing had the calls to judge its error ratio on \(GetOrder 200, Refund 200, ListRefunds 200\): no evidence is no pass; billing-green is scaled back to zero/,
    );
    expect(told(empty.calls).at(-1)).toBe("patch deployment/billing-green /spec/replicas=0");
    const down = await release(plain, { prometheus: ["error"], jobs: ["Complete"] });
    expect(down.outcome!.message).toMatch(
      /failed the release gate before the flip: Prometheus could not answer the gate queries 2 times in a row: kubectl get --raw .*no endpoints available/,
    );
    expect(told(down.calls).filter((c) => c.startsWith("patch service"))).toEqual([]);
  });

  it("a version that fails on the clients' calls after the flip is flipped back to blue, and green scaled to zero", async () => {
    const { calls, outcome } = await release(plain, { prometheus: ["good", "bad"], jobs: ["Complete", "Complete"] });
    expect(outcome!.message).toMatch(
      /^registry\S+:v2 failed the release gate after the flip: billing GetOrder error ratio 32\.8 % \(budget 0\.5 %\): above its budget; rolled back: billing selects the blue pods again and billing-green is scaled to zero$/,
    );
    // The same flip back as `--rollback`: blue Ready, the Service, preview and autoscaler back, the delay, then green to zero.
    expect(told(calls).slice(-7)).toEqual([
      ...QUERIES,
      "patch deployment/billing-blue /spec/replicas=2",
      'patch service/billing /spec/selector/version="blue"',
      'patch service/billing-preview /spec/selector/version="green"',
      'patch horizontalpodautoscaler/billing /spec/scaleTargetRef/name="billing-blue"',
      "patch deployment/billing-green /spec/replicas=0",
    ]);
  });
});

describe("pnpm release --k8s, plain path, when a step after the flip cannot run", () => {
  const GOOD = { prometheus: ["good", "good"], jobs: ["Complete", "Complete"] } as const;
  const WEBHOOK = "Error from server \\(InternalError\\): .*failed calling webhook: context deadline exceeded";
  const ROLLED_BACK = "rolled back: billing selects the blue pods again and billing-green is scaled to zero";
  const FLIP_BACK = [
    "patch deployment/billing-blue /spec/replicas=2",
    'patch service/billing /spec/selector/version="blue"',
    'patch service/billing-preview /spec/selector/version="green"',
    'patch horizontalpodautoscaler/billing /spec/scaleTargetRef/name="billing-blue"',
    "patch deployment/billing-green /spec/replicas=0",
  ];

  it("flips back to blue when the API server refuses the smoke Job of the gate after the flip: green was never judged", async () => {
    const { calls, outcome } = await release(plain, { ...GOOD, refuse: ["create billing-smoke-live"] });
    expect(outcome).toBeInstanceOf(ReleaseRefused);
    expect(outcome!.message).toMatch(
      new RegExp(
        `^${NEW} could not be judged by the release gate after the flip: kubectl .*${WEBHOOK}; ${ROLLED_BACK}$`,
      ),
    );
    expect(told(calls).slice(-6)).toEqual(["create billing-smoke-live", ...FLIP_BACK]);
  });

  it("flips back when the autoscaler patch after the flip is refused, leaving the autoscaler it never changed", async () => {
    const { calls, outcome } = await release(plain, { ...GOOD, refuse: ["patch horizontalpodautoscaler/billing"] });
    expect(outcome!.message).toMatch(
      new RegExp(`^the autoscaler scales billing-green: kubectl .*${WEBHOOK}; ${ROLLED_BACK}$`),
    );
    expect(told(calls).filter((c) => c.startsWith("create billing-smoke-live"))).toEqual([]);
    expect(told(calls).slice(-5)).toEqual([
      'patch horizontalpodautoscaler/billing /spec/scaleTargetRef/name="billing-green"',
      ...FLIP_BACK.filter((c) => !c.includes("horizontalpodautoscaler")),
    ]);
  });

  it("says the unjudged green may still be live, and how to flip back, when the flip back fails too", async () => {
    const { outcome } = await release(plain, {
      ...GOOD,
      refuse: ["create billing-smoke-live", "patch deployment/billing-blue"],
    });
    expect(outcome!.message).toMatch(
      /; undoing the release failed too \(.*failed calling webhook.*\): the green pods, \S+:v2 may still be live, unjudged — `pnpm release billing --k8s --rollback` puts \S+:unset back$/,
    );
  });
});

describe("pnpm release --k8s, Argo Rollouts, against a recording kubectl", () => {
  const status = (extra: object) => ({
    status: { currentPodHash: "new", stableRS: "old", blueGreen: { activeSelector: "old" }, phase: "Paused", ...extra },
  });

  it.each([
    [
      "aborted by its analysis",
      {
        abort: true,
        phase: "Degraded",
        message: 'RolloutAborted: Metric "error-ratio" assessed Failed due to failed (2) > failureLimit (1)',
      },
      'Rollout billing was aborted by its analysis (RolloutAborted: Metric "error-ratio" assessed Failed due to failed (2) > failureLimit (1))',
    ],
    [
      "paused on an inconclusive analysis",
      { pauseConditions: [{ reason: "InconclusiveAnalysisRun", startTime: "2026-12-01T19:00:00Z" }], message: "" },
      "Rollout billing paused on an inconclusive analysis (an analysis was inconclusive)",
    ],
  ])("a Rollout %s gets its stable image back", async (_why, extra, why) => {
    const { calls, outcome } = await release(argo, { rollout: status(extra) });
    expect(outcome!.message).toBe(`${why}; rolled back, ${LIVE} is the Rollout's image again and its pods stay active`);
    expect(told(calls)).toEqual([
      "create billing-migrate",
      `patch deployment/billing /spec/template/spec/containers/0/image="${NEW}"`,
      `patch deployment/billing /spec/template/spec/containers/0/image="${LIVE}"`,
    ]);
  });
});
