// A blue-green release of one tool on Kubernetes, through whichever release path is deployed:
// - argo-rollouts: the new image goes into the Deployment the Rollout takes its template from;
//   Argo starts the preview pods, runs the pre-promotion analysis, promotes (or aborts and keeps
//   the old pods active), runs the post-promotion analysis and scales the old pods down after
//   scaleDownDelaySeconds. A rollback puts the previous image back (rollbackWindow: no analysis).
// - plain-blue-green: the idle colour gets the new image and the live replica count; once every
//   new pod is Ready (the kubelet's native gRPC probe on grpc.health.v1 answered SERVING), the
//   tool's Service is switched to it, the preview Service to the old colour and the autoscaler to
//   the new Deployment; the old colour keeps running for the scale-down delay, while clients
//   resolve the name again, then is scaled to zero (preStop, then SIGTERM: calls in flight
//   finish). A rollback switches back the same way, without changing an image.
// A release on the plain path passes the release gate twice (k8s-apply.ts runs it): before the flip
// a smoke Job through `<tool>-preview` and the gate queries on the new colour's pods, after it
// (and the scale-down delay) a smoke Job through `<tool>` and the same queries on every client's
// calls. A gate that fails undoes the release: before the flip the new colour goes back to zero
// pods, after it the plan flips back (a rollback, planned here too). On Argo the gate is the
// Rollout's own analysis; an abort (or an inconclusive pause) puts the stable image back.
// The plan is computed from the live objects (kubectl, or a `kubectl kustomize` rendering for a
// review without a cluster) as JSON patches guarded by `test` operations, so a concurrent change
// fails the patch rather than being overwritten; `--dry-run` shows each patch and the object it
// produces, and the tests validate those objects strictly.
import type { IRollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment, ReplicaSet } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { Service } from "kubernetes-types/core/v1.js";
import type { K8sObject } from "../manifests/renderings.js";
import type { ReleasePath } from "../manifests/generated-components.js";
import {
  type Colour,
  COLOUR_LABEL,
  COLOURS,
  colourDeploymentName,
  previewServiceName,
  SCALE_DOWN_DELAY_SECONDS,
} from "../manifests/release-objects.js";
import { WAIT_FOR_SCHEMA } from "../manifests/migration-objects.js";
import { ReleaseRefused } from "./contract-gate.js";
import type { ReleaseGate } from "./gate.js";
import { PlanBuilder, type Step } from "./k8s-plan-steps.js";
import type { ReleaseKind } from "./result.js";

export {
  FIELD_MANAGER,
  type GateStep,
  type MigrateStep,
  type PatchStep,
  type Step,
  type WaitStep,
} from "./k8s-plan-steps.js";

export interface K8sPlan {
  readonly tool: string;
  readonly kind: ReleaseKind;
  readonly path: ReleasePath;
  readonly namespace: string;
  readonly from: { readonly colour?: Colour; readonly image: string; readonly objects: readonly string[] };
  readonly to: { readonly colour?: Colour; readonly image: string; readonly objects: readonly string[] };
  readonly steps: readonly Step[];
}

type Objects = readonly K8sObject[];

function find<T>(objects: Objects, kind: string, name: string): (K8sObject & T) | undefined {
  return objects.find((o) => o.kind === kind && o.metadata.name === name) as (K8sObject & T) | undefined;
}

function containerIndex(deployment: Deployment, tool: string): number {
  const index = deployment.spec!.template.spec!.containers.findIndex((c) => c.name === tool);
  if (index < 0) throw new ReleaseRefused(`Deployment ${deployment.metadata!.name} has no container named ${tool}`);
  return index;
}

function imageOf(deployment: Deployment, tool: string): string {
  return deployment.spec!.template.spec!.containers[containerIndex(deployment, tool)]!.image!;
}

/** The live image's repository with another tag: registry.example.com/loopguard/billing:3f2a1bc. */
export function withTag(image: string, tag: string): string {
  const repository = image.replace(/@sha256:[0-9a-f]+$/, "").replace(/:[^:/]+$/, "");
  return `${repository}:${tag}`;
}

/** Which release path serves the tool; refuses a tool deployed without one. */
export function releasePathOf(objects: Objects, tool: string): ReleasePath {
  if (find(objects, "Rollout", tool)) return "argo-rollouts";
  if (COLOURS.every((colour) => find(objects, "Deployment", colourDeploymentName(tool, colour))))
    return "plain-blue-green";
  throw new ReleaseRefused(
    `${tool} is deployed without a release path: add deploy/k8s/components/argo-rollouts (clusters with Argo Rollouts) or deploy/k8s/components/plain-blue-green to the overlay`,
  );
}

function planPlain(
  builder: PlanBuilder,
  objects: Objects,
  spec: ServiceSpec,
  kind: ReleaseKind,
  tag: string | undefined,
  gate?: ReleaseGate,
): Omit<K8sPlan, "steps" | "namespace"> {
  const tool = spec.name;
  const service = find<Service>(objects, "Service", tool);
  const activeColour = service?.spec?.selector?.[COLOUR_LABEL] as Colour | undefined;
  if (!service || !activeColour || !COLOURS.includes(activeColour))
    throw new ReleaseRefused(`Service ${tool} selects no colour (${COLOUR_LABEL}: blue|green)`);
  const idleColour = COLOURS.find((c) => c !== activeColour)!;
  const active = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, activeColour))!;
  const idle = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, idleColour))!;
  const liveImage = imageOf(active, tool);
  const idleImage = imageOf(idle, tool);
  const image = kind === "release" ? withTag(liveImage, tag!) : idleImage;
  if (kind === "release" && image === liveImage) throw new ReleaseRefused(`${tool} already runs ${liveImage}`);
  if (kind === "rollback" && idleImage === liveImage)
    throw new ReleaseRefused(`nothing to roll back to: ${idle.metadata!.name} runs the live image ${liveImage}`);
  const hpa = find<HorizontalPodAutoscaler>(objects, "HorizontalPodAutoscaler", tool);
  const replicas = active.spec?.replicas ?? hpa?.spec?.minReplicas ?? 1;
  const containerPath = `/spec/template/spec/containers/${containerIndex(idle, tool)}/image`;
  const [activeName, idleName] = [active.metadata!.name!, idle.metadata!.name!];

  builder.patch(
    "Deployment",
    idleName,
    `${idleName}: ${kind === "release" ? `image ${image}, ` : ""}${replicas} replica(s), as many as ${activeName} runs`,
    [
      { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: idleColour },
      { op: "test", path: containerPath, value: idleImage },
      ...(image === idleImage ? [] : [{ op: "replace" as const, path: containerPath, value: image }]),
      { op: "add", path: "/spec/replicas", value: replicas },
    ],
  );
  builder.wait(
    "Deployment",
    idleName,
    `every ${idleName} pod Ready: its gRPC readiness probe (grpc.health.v1) answers SERVING`,
    "ready",
    ["kubectl", "-n", builder.namespace, "rollout", "status", `deployment/${idleName}`],
  );
  if (gate) {
    const undo = builder.fork();
    undo.patch("Deployment", idleName, `scale ${idleName} back to zero: it failed the gate`, [
      { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: idleColour },
      { op: "add", path: "/spec/replicas", value: 0 },
    ]);
    builder.gate(spec, gate, "before the flip", previewServiceName(tool), idleColour, image, {
      steps: undo.steps,
      undone: `${idleName} is scaled back to zero and ${activeName} stays live`,
    });
  }
  builder.patch("Service", tool, `flip: ${tool} selects the ${idleColour} pods`, [
    { op: "test", path: `/spec/selector/${COLOUR_LABEL}`, value: activeColour },
    { op: "replace", path: `/spec/selector/${COLOUR_LABEL}`, value: idleColour },
  ]);
  if (find(objects, "Service", previewServiceName(tool))) {
    builder.patch(
      "Service",
      previewServiceName(tool),
      `${previewServiceName(tool)} selects the ${activeColour} pods, for a check before scale-down`,
      [
        { op: "test", path: `/spec/selector/${COLOUR_LABEL}`, value: idleColour },
        { op: "replace", path: `/spec/selector/${COLOUR_LABEL}`, value: activeColour },
      ],
    );
  }
  if (hpa) {
    builder.patch("HorizontalPodAutoscaler", tool, `the autoscaler scales ${idleName}`, [
      { op: "test", path: "/spec/scaleTargetRef/name", value: activeName },
      { op: "replace", path: "/spec/scaleTargetRef/name", value: idleName },
    ]);
  }
  builder.wait(
    "Deployment",
    activeName,
    `${activeName} stays up ${SCALE_DOWN_DELAY_SECONDS} s while clients resolve ${tool} again (max connection age)`,
    "delay",
    ["sleep", String(SCALE_DOWN_DELAY_SECONDS)],
    SCALE_DOWN_DELAY_SECONDS,
  );
  if (gate) {
    // Planned from the objects as the flip leaves them: the same flip back as `--rollback`, ungated.
    const undo = builder.fork();
    planPlain(undo, undo.current(), spec, "rollback", undefined);
    builder.gate(spec, gate, "after the flip", tool, idleColour, image, {
      steps: undo.steps,
      undone: `rolled back: ${tool} selects the ${activeColour} pods again and ${idleName} is scaled to zero`,
    });
  }
  builder.patch(
    "Deployment",
    activeName,
    `scale ${activeName} to zero: preStop, then SIGTERM drains calls in flight (\`pnpm release ${tool} --k8s --rollback\` scales it up again)`,
    [
      { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: activeColour },
      { op: "add", path: "/spec/replicas", value: 0 },
    ],
  );
  return {
    tool,
    kind,
    path: "plain-blue-green",
    from: { colour: activeColour, image: liveImage, objects: [`deployment/${activeName}`] },
    to: { colour: idleColour, image, objects: [`deployment/${idleName}`] },
  };
}

function revisionOf(set: ReplicaSet): number {
  return Number(set.metadata?.annotations?.["rollout.argoproj.io/revision"] ?? 0);
}

function planArgo(
  builder: PlanBuilder,
  objects: Objects,
  spec: ServiceSpec,
  kind: ReleaseKind,
  tag: string | undefined,
): Omit<K8sPlan, "steps" | "namespace"> {
  const tool = spec.name;
  const rollout = find<IRollout>(objects, "Rollout", tool)!;
  const templateName = rollout.spec.workloadRef?.name;
  const template = templateName ? find<Deployment>(objects, "Deployment", templateName) : undefined;
  if (!template)
    throw new ReleaseRefused(
      `Rollout ${tool} takes no template from a Deployment (workloadRef), as components/argo-rollouts makes it`,
    );
  const replicaSets = (objects.filter((o) => o.kind === "ReplicaSet") as ReplicaSet[]).filter((set) =>
    set.metadata?.ownerReferences?.some((r) => r.kind === "Rollout" && r.name === tool),
  );
  const imageOfSet = (set: ReplicaSet) => set.spec!.template!.spec!.containers.find((c) => c.name === tool)?.image;
  const stable = replicaSets.find(
    (set) => set.metadata!.labels?.["rollouts-pod-template-hash"] === rollout.status?.stableRS,
  );
  const current = imageOf(template, tool);
  const liveImage = (stable && imageOfSet(stable)) ?? current;
  let image: string;
  if (kind === "release") {
    image = withTag(liveImage, tag!);
    if (image === liveImage) throw new ReleaseRefused(`${tool} already runs ${liveImage}`);
  } else if (current !== liveImage) {
    // A release under way (or aborted by its analysis): back to the stable pods.
    image = liveImage;
  } else {
    const previous = replicaSets
      .filter((set) => revisionOf(set) < (stable ? revisionOf(stable) : Infinity))
      .sort((a, b) => revisionOf(b) - revisionOf(a))[0];
    const previousImage = previous && imageOfSet(previous);
    if (!previousImage || previousImage === liveImage)
      throw new ReleaseRefused(`nothing to roll back to: Rollout ${tool} has no earlier revision with another image`);
    image = previousImage;
  }
  const containerPath = `/spec/template/spec/containers/${containerIndex(template, tool)}/image`;
  builder.patch(
    "Deployment",
    template.metadata!.name!,
    `${kind === "release" ? "release" : "roll back"} ${tool} to ${image} (Rollout ${tool} takes its template from here)`,
    [
      { op: "test", path: containerPath, value: current },
      { op: "replace", path: containerPath, value: image },
    ],
  );
  let onFailure: Step[] | undefined;
  if (kind === "release") {
    // A new template clears an abort or a pause on an inconclusive analysis; the stable one needs no analysis (rollbackWindow).
    const undo = builder.fork();
    undo.patch(
      "Deployment",
      template.metadata!.name!,
      `put the stable image ${liveImage} back, so the Rollout settles on the stable pods`,
      [
        { op: "test", path: containerPath, value: image },
        { op: "replace", path: containerPath, value: liveImage },
      ],
    );
    onFailure = undo.steps;
  }
  builder.wait(
    "Rollout",
    tool,
    kind === "release"
      ? `preview pods Ready, pre-promotion analysis (${tool}-slo: smoke Job through ${previewServiceName(tool)}, the gate queries), promotion, post-promotion analysis; a failure aborts and the stable image goes back`
      : "the previous pods active again (rollbackWindow: no analysis while they are still up)",
    "promoted",
    ["kubectl", "argo", "rollouts", "-n", builder.namespace, "status", tool],
    undefined,
    onFailure,
  );
  return {
    tool,
    kind,
    path: "argo-rollouts",
    from: { image: liveImage, objects: [`rollout/${tool}`] },
    to: { image, objects: [`rollout/${tool}`] },
  };
}

/** Whether the tool's pods wait for a migration step (components/postgres-stores): then the release runs one first. */
function waitsForSchema(objects: Objects): boolean {
  return objects.some(
    (o) =>
      o.kind === "Deployment" &&
      (o as K8sObject & Deployment).spec?.template.spec?.initContainers?.some((c) => c.name === WAIT_FOR_SCHEMA),
  );
}

/**
 * The release's steps against the live objects of the tool (its Deployments, Services, HPA, Rollout
 * and ReplicaSets); a release on the plain path with `gate` passes it before and after the flip.
 */
export function planK8sRelease(options: {
  readonly objects: Objects;
  readonly spec: ServiceSpec;
  readonly namespace: string;
  readonly kind: ReleaseKind;
  readonly tag?: string;
  readonly gate?: ReleaseGate;
}): K8sPlan {
  const { objects, spec, namespace, kind, tag } = options;
  if (spec.kind !== "tool") throw new ReleaseRefused(`${spec.name} is not a tool: blue-green releases are per tool`);
  if (kind === "release" && !tag) throw new ReleaseRefused("a release needs --to <image tag>");
  const builder = new PlanBuilder(namespace, objects);
  const gate = kind === "release" ? options.gate : undefined;
  const plan =
    releasePathOf(objects, spec.name) === "argo-rollouts"
      ? planArgo(builder, objects, spec, kind, tag)
      : planPlain(builder, objects, spec, kind, tag, gate);
  // The new image's migrations before anything of the release: its pods would wait for them.
  if (kind === "release" && waitsForSchema(objects)) builder.migrateFirst(spec, plan.to.image);
  return { ...plan, namespace, steps: builder.steps };
}
