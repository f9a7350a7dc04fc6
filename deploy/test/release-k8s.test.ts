// What `pnpm release <tool> --k8s` would apply, planned against the rendered manifests of each
// release path (prod + argo-rollouts, prod + plain-blue-green): every object a patch leaves passes
// the same strict validation as the manifests, the plain path flips the Service, the preview and
// the autoscaler only after the new colour is Ready and scales the old one down only after the
// delay, and a live object in another state than planned for refuses the release.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import type { Deployment, ReplicaSet } from "kubernetes-types/apps/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, renderOnProd, type Rendering, validateRenderings } from "../src/manifests/renderings.js";
import { COMPONENTS_DIR, OVERLAYS_DIR } from "../src/manifests/generated-components.js";
import { SCALE_DOWN_DELAY_SECONDS } from "../src/manifests/release-objects.js";
import { ReleaseRefused } from "../src/release/contract-gate.js";
import { releaseGateOf } from "../src/release/gate.js";
import {
  type GateStep,
  type K8sPlan,
  type MigrateStep,
  type PatchStep,
  planK8sRelease,
  type Step,
  withTag,
} from "../src/release/k8s.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));
const tools = services.filter((s) => s.kind === "tool");
const spec = (name: string) => services.find((s) => s.name === name)!;

let plain: Rendering;
let argo: Rendering;
let prod: Rendering;
beforeAll(() => {
  const render = (components: string[]) =>
    renderOnProd(join(root, OVERLAYS_DIR), join(root, COMPONENTS_DIR), components);
  plain = render(["plain-blue-green"]);
  argo = render(["argo-rollouts"]);
  prod = render([]);
}, 60_000);

const objectsOf = (rendering: Rendering, tool: string) =>
  rendering.objects.filter((o) => o.metadata.labels?.["app.kubernetes.io/name"] === tool);
const plan = (
  rendering: Rendering,
  tool: string,
  kind: "release" | "rollback" = "release",
  objects = objectsOf(rendering, tool),
) =>
  planK8sRelease({
    objects,
    spec: spec(tool),
    namespace: "loopguard",
    kind,
    ...(kind === "release" ? { tag: "v2" } : {}),
  });
const patches = (p: K8sPlan) => p.steps.filter((s): s is PatchStep => s.action === "patch");
/** A step by what it does and to what; a migrate Job's name loses its per-release suffix. */
const named = (s: Step) =>
  `${s.action} ${s.kind}/${s.action === "migrate" ? s.name.replace(/-[a-z0-9]+$/, "") : s.name}`;

/** The objects as the last patch of each leaves them, and the Jobs the plan creates, as one rendering to validate. */
function results(p: K8sPlan): Rendering {
  const last = new Map(patches(p).map((step) => [`${step.kind}/${step.name}`, step.result]));
  const jobs = p.steps.flatMap((s) => (s.action === "migrate" ? [s.job] : []));
  return { name: `release ${p.tool}`, objects: [...last.values(), ...jobs] };
}

function refusal(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ReleaseRefused);
    return (error as Error).message;
  }
  throw new Error("not refused");
}

describe("plain-blue-green", () => {
  it("leaves objects that pass the strict validation, for every tool", () => {
    expect(validateRenderings(tools.map((t) => results(plan(plain, t.name))))).toEqual([]);
  }, 60_000);

  it("releases into the idle colour, flips once it is Ready, and scales the old colour down after the delay", () => {
    const p = plan(plain, "billing");
    expect(p).toMatchObject({
      path: "plain-blue-green",
      from: { colour: "blue", image: "registry.example.com/loopguard/billing:unset" },
      to: { colour: "green", image: "registry.example.com/loopguard/billing:v2" },
    });
    expect(p.steps.map(named)).toEqual([
      "migrate Job/billing-migrate",
      "patch Deployment/billing-green",
      "wait Deployment/billing-green",
      "patch Service/billing",
      "patch Service/billing-preview",
      "patch HorizontalPodAutoscaler/billing",
      "wait Deployment/billing-blue",
      "patch Deployment/billing-blue",
    ]);
    const [migrate, green, , service, preview, hpa, , blue] = p.steps as PatchStep[];
    // The new image migrates first, in a Job from that image; green's pods wait for it.
    expect((migrate as unknown as MigrateStep).job).toMatchObject({
      kind: "Job",
      spec: {
        template: { spec: { containers: [{ image: "registry.example.com/loopguard/billing:v2", args: ["migrate"] }] } },
      },
    });
    const greenDeployment = green!.result as K8sObject & Deployment;
    expect(greenDeployment.spec!.template.spec!.containers[0]!.image).toBe("registry.example.com/loopguard/billing:v2");
    expect(greenDeployment.spec!.replicas).toBe(2);
    expect(p.steps[2]).toMatchObject({ until: "ready" });
    expect(service!.result).toMatchObject({
      spec: { selector: { "app.kubernetes.io/name": "billing", version: "green" } },
    });
    expect(preview!.result).toMatchObject({ spec: { selector: { version: "blue" } } });
    expect(hpa!.result).toMatchObject({ spec: { scaleTargetRef: { kind: "Deployment", name: "billing-green" } } });
    expect(p.steps[6]).toMatchObject({ until: "delay", seconds: SCALE_DOWN_DELAY_SECONDS });
    expect((blue!.result as K8sObject & Deployment).spec!.replicas).toBe(0);
    // Guarded: each patch first tests the state it was planned against.
    for (const step of patches(p)) expect(step.patch[0]!.op).toBe("test");
    expect(service!.command).toEqual([
      "kubectl",
      "-n",
      "loopguard",
      "patch",
      "service",
      "billing",
      "--type",
      "json",
      "--field-manager",
      "loopguard-release",
      "-p",
      JSON.stringify(service!.patch),
    ]);
  });

  it("rolls back by flipping to the other colour without changing its image, and has nothing to roll back to before a release", () => {
    const released = plan(plain, "billing");
    const afterRelease = objectsOf(plain, "billing").map(
      (o) => results(released).objects.find((r) => r.kind === o.kind && r.metadata.name === o.metadata.name) ?? o,
    );
    const back = plan(plain, "billing", "rollback", afterRelease);
    expect(back).toMatchObject({
      kind: "rollback",
      from: { colour: "green", image: "registry.example.com/loopguard/billing:v2" },
      to: { colour: "blue", image: "registry.example.com/loopguard/billing:unset" },
    });
    expect(patches(back)[0]!.patch.some((op) => op.op === "replace")).toBe(false);
    expect(validateRenderings([results(back)])).toEqual([]);
    expect(refusal(() => plan(plain, "billing", "rollback"))).toBe(
      "nothing to roll back to: billing-green runs the live image registry.example.com/loopguard/billing:unset",
    );
  }, 60_000);

  it("refuses when the live objects are not in the state it planned for", () => {
    const objects = objectsOf(plain, "billing").map((o) =>
      o.kind === "Deployment" && o.metadata.name === "billing-green"
        ? withImage(o, "registry.example.com/loopguard/billing:hand-edited")
        : o,
    );
    const flipped = objects.map((o) =>
      o.kind === "Service" && o.metadata.name === "billing-preview"
        ? { ...o, spec: { ...(o.spec as object), selector: { version: "blue" } } }
        : o,
    );
    expect(refusal(() => plan(plain, "billing", "release", flipped))).toMatch(
      /^Service billing-preview is not as expected .*another release or a hand edit may be under way$/,
    );
    expect(plan(plain, "billing", "release", objects).to.image).toBe("registry.example.com/loopguard/billing:v2");
  });

  it("with the release gate: a smoke Job through the preview before the flip and through the Service after the delay, each undone by what it names; every object valid", () => {
    const p = planK8sRelease({
      objects: objectsOf(plain, "billing"),
      spec: spec("billing"),
      namespace: "loopguard",
      kind: "release",
      tag: "v2",
      gate: releaseGateOf(root, services, "billing"),
    });
    expect(p.steps.map((s) => (s.action === "gate" ? `gate Job/${s.when}` : named(s)))).toEqual([
      "migrate Job/billing-migrate",
      "patch Deployment/billing-green",
      "wait Deployment/billing-green",
      "gate Job/before the flip",
      "patch Service/billing",
      "patch Service/billing-preview",
      "patch HorizontalPodAutoscaler/billing",
      "wait Deployment/billing-blue",
      "gate Job/after the flip",
      "patch Deployment/billing-blue",
    ]);
    const gates = p.steps.filter((s): s is GateStep => s.action === "gate");
    expect(gates.map((g) => g.undone)).toEqual([
      "billing-green is scaled back to zero and billing-blue stays live",
      "rolled back: billing selects the blue pods again and billing-green is scaled to zero",
    ]);
    expect(gates[0]!.onFailure.map((s) => `${s.action} ${s.kind}/${s.name}`)).toEqual([
      "patch Deployment/billing-green",
    ]);
    expect(gates[1]!.onFailure.map((s) => `${s.action} ${s.kind}/${s.name}`)).toEqual([
      "patch Deployment/billing-blue",
      "wait Deployment/billing-blue",
      "patch Service/billing",
      "patch Service/billing-preview",
      "patch HorizontalPodAutoscaler/billing",
      "wait Deployment/billing-green",
      "patch Deployment/billing-green",
    ]);
    const undone = gates.flatMap((g) => g.onFailure.flatMap((s) => (s.action === "patch" ? [s.result] : [])));
    expect(validateRenderings([{ name: "gated release", objects: [...gates.map((g) => g.job), ...undone] }])).toEqual(
      [],
    );
    expect(gates.map((g) => g.queries.map((q) => q.query.includes('version="green"')))).toEqual([
      [true, true],
      [true, true],
    ]);
  }, 60_000);

  it("refuses a release of the image that runs", () => {
    expect(
      refusal(() =>
        planK8sRelease({
          objects: objectsOf(plain, "billing"),
          spec: spec("billing"),
          namespace: "loopguard",
          kind: "release",
          tag: "unset",
        }),
      ),
    ).toBe("billing already runs registry.example.com/loopguard/billing:unset");
  });
});

function withImage(object: K8sObject, image: string): K8sObject {
  const copy = structuredClone(object) as K8sObject & Deployment;
  copy.spec!.template.spec!.containers[0]!.image = image;
  return copy;
}

describe("argo-rollouts", () => {
  it("releases every tool by setting the image of the Deployment its Rollout reads, then waits for promotion; the result validates", () => {
    const plans = tools.map((t) => plan(argo, t.name));
    for (const p of plans) {
      expect(p.path).toBe("argo-rollouts");
      const migrates = services.find((s) => s.name === p.tool)!.stateful ? [`migrate Job/${p.tool}-migrate`] : [];
      expect(p.steps.map(named)).toEqual([...migrates, `patch Deployment/${p.tool}`, `wait Rollout/${p.tool}`]);
      expect(p.steps.at(-1)).toMatchObject({ until: "promoted" });
    }
    expect(validateRenderings(plans.map(results))).toEqual([]);
  }, 60_000);

  it("rolls back to the previous revision's image, or back to the stable pods while a release is under way", () => {
    const objects = objectsOf(argo, "billing");
    const replicaSet = (revision: number, hash: string, image: string): K8sObject & ReplicaSet => ({
      apiVersion: "apps/v1",
      kind: "ReplicaSet",
      metadata: {
        name: `billing-${hash}`,
        labels: { "app.kubernetes.io/name": "billing", "rollouts-pod-template-hash": hash },
        annotations: { "rollout.argoproj.io/revision": String(revision) },
        ownerReferences: [{ apiVersion: "argoproj.io/v1alpha1", kind: "Rollout", name: "billing", uid: "u" }],
      },
      spec: {
        selector: { matchLabels: { "rollouts-pod-template-hash": hash } },
        template: { spec: { containers: [{ name: "billing", image }] } },
      },
    });
    const withStatus = (stable: string) =>
      objects.map((o) => (o.kind === "Rollout" ? { ...o, status: { stableRS: stable, currentPodHash: stable } } : o));
    const old = "registry.example.com/loopguard/billing:v1";
    const live = "registry.example.com/loopguard/billing:unset";
    const history = [replicaSet(1, "aaa", old), replicaSet(2, "bbb", live)];
    const back = plan(argo, "billing", "rollback", [...withStatus("bbb"), ...history]);
    expect(back).toMatchObject({ from: { image: live }, to: { image: old } });
    expect(patches(back)[0]!.patch).toEqual([
      { op: "test", path: "/spec/template/spec/containers/0/image", value: live },
      { op: "replace", path: "/spec/template/spec/containers/0/image", value: old },
    ]);
    // Mid-release: the template already names v2, the stable pods still run the live image.
    const underway = [
      ...withStatus("bbb").map((o) =>
        o.kind === "Deployment" ? withImage(o, "registry.example.com/loopguard/billing:v2") : o,
      ),
      ...history,
    ];
    expect(plan(argo, "billing", "rollback", underway).to.image).toBe(live);
    expect(refusal(() => plan(argo, "billing", "rollback"))).toBe(
      "nothing to roll back to: Rollout billing has no earlier revision with another image",
    );
  });
});

describe("either path", () => {
  it("refuses a tool deployed without a release path, and the orchestrator", () => {
    expect(refusal(() => plan(prod, "billing"))).toMatch(
      /^billing is deployed without a release path: add deploy\/k8s\/components\/argo-rollouts/,
    );
    expect(
      refusal(() =>
        planK8sRelease({
          objects: objectsOf(plain, "orchestrator"),
          spec: spec("orchestrator"),
          namespace: "loopguard",
          kind: "release",
          tag: "v2",
        }),
      ),
    ).toBe("orchestrator is not a tool: blue-green releases are per tool");
  });

  it("keeps the live image's registry and repository and changes its tag", () => {
    expect(withTag("registry.example.com:5000/team/loopguard/billing:3f2a1bc", "4e5d6f7")).toBe(
      "registry.example.com:5000/team/loopguard/billing:4e5d6f7",
    );
    expect(withTag("loopguard/billing@sha256:0123abcd", "v2")).toBe("loopguard/billing:v2");
    expect(withTag("loopguard/billing", "v2")).toBe("loopguard/billing:v2");
  });
});
