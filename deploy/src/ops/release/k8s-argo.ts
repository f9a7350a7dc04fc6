// Kubernetes's Argo Rollouts path: the new image goes into the Deployment the Rollout takes its
// template from; Argo runs the blue-green model itself (blue-green.ts: preview pods, the
// pre-promotion analysis, promotion, the post-promotion analysis, scale-down after
// scaleDownDelaySeconds). A rollback puts the previous image back (rollbackWindow: no analysis);
// an abort (or an inconclusive pause) puts the stable image back.
import type { IRollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment, ReplicaSet } from "kubernetes-types/apps/v1.js";
import { previewServiceName } from "../../manifests/release-objects.js";
import { ReleaseRefused } from "./contract-gate.js";
import {
  containerIndex,
  find,
  imageOf,
  type K8sPlan,
  type Objects,
  type PlanBuilder,
  type Undo,
  withTag,
} from "./k8s-plan-steps.js";
import type { ReleaseKind } from "./result.js";

function revisionOf(set: ReplicaSet): number {
  return Number(set.metadata?.annotations?.["rollout.argoproj.io/revision"] ?? 0);
}

export function planArgo(
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
  // A new template clears an abort or a pause on an inconclusive analysis; the stable one needs no analysis (rollbackWindow).
  const stableBack: Undo | undefined =
    kind === "release"
      ? {
          plan: (undo) =>
            undo.patch(
              "Deployment",
              template.metadata!.name!,
              `put the stable image ${liveImage} back, so the Rollout settles on the stable pods`,
              [
                { op: "test", path: containerPath, value: image },
                { op: "replace", path: containerPath, value: liveImage },
              ],
            ),
          undone: `rolled back, ${liveImage} is the Rollout's image again and its pods stay active`,
        }
      : undefined;
  builder.wait(
    "Rollout",
    tool,
    kind === "release"
      ? `preview pods Ready, pre-promotion analysis (${tool}-slo: smoke Job through ${previewServiceName(tool)}, the gate queries), promotion, post-promotion analysis; a failure aborts and the stable image goes back`
      : "the previous pods active again (rollbackWindow: no analysis while they are still up)",
    "promoted",
    ["kubectl", "argo", "rollouts", "-n", builder.namespace, "status", tool],
    undefined,
    stableBack,
  );
  return {
    tool,
    kind,
    path: "argo-rollouts",
    from: { image: liveImage, objects: [`rollout/${tool}`] },
    to: { image, objects: [`rollout/${tool}`] },
  };
}
