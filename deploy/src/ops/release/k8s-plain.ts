// Kubernetes's plain blue-green path, planned through the blue-green model (blue-green.ts): the
// idle colour gets the new image and the live replica count; once every new pod is Ready (the
// kubelet's native gRPC probe on grpc.health.v1 answered SERVING), the tool's Service is switched
// to it, the preview Service to the old colour and the autoscaler to the new Deployment; the old
// colour keeps running for the scale-down delay, while clients resolve the name again, then is
// scaled to zero (preStop, then SIGTERM: calls in flight finish). A rollback switches back the
// same way, without changing an image. A release passes the release gate twice (k8s-apply.ts runs
// it): before the flip a smoke Job through `<tool>-preview` and the gate queries on the new
// colour's pods, after it (and the scale-down delay) a smoke Job through `<tool>` and the same
// queries on every client's calls. Those pods are this release's own: the release labels the new
// colour's pod template with an id of its own (RELEASE_LABEL), so the pods the same colour ran
// before — drained minutes ago, their calls still in the queries' windows — are never judged with
// them, even when they ran the same image. A failure before the flip scales the new colour back to
// zero; after it the plan flips back (a rollback, planned here too).
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { Service } from "kubernetes-types/core/v1.js";
import {
  type Colour,
  COLOUR_LABEL,
  COLOURS,
  colourDeploymentName,
  previewServiceName,
  RELEASE_LABEL,
  SCALE_DOWN_DELAY_SECONDS,
} from "../../manifests/release-objects.js";
import { type BlueGreenDriver, idleColour, planBlueGreen } from "./blue-green.js";
import { ReleaseRefused } from "./contract-gate.js";
import type { ReleaseGate } from "./gate.js";
import type { K8sPlan, Objects, PlanBuilder, Undo } from "./k8s-plan-steps.js";
import { containerIndex, find, imageOf, withTag } from "./k8s-plan-steps.js";
import type { ReleaseKind } from "./result.js";

export function planPlain(
  builder: PlanBuilder,
  objects: Objects,
  spec: ServiceSpec,
  kind: ReleaseKind,
  tag: string | undefined,
  gate?: ReleaseGate,
  midway = false,
): Omit<K8sPlan, "steps" | "namespace"> {
  const tool = spec.name;
  const service = find<Service>(objects, "Service", tool);
  const activeColour = service?.spec?.selector?.[COLOUR_LABEL] as Colour | undefined;
  if (!service || !activeColour || !COLOURS.includes(activeColour))
    throw new ReleaseRefused(`Service ${tool} selects no colour (${COLOUR_LABEL}: blue|green)`);
  const idle = idleColour(activeColour);
  const active = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, activeColour))!;
  const idleDeployment = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, idle))!;
  const [activeName, idleName] = [active.metadata!.name!, idleDeployment.metadata!.name!];
  const liveImage = imageOf(active, tool);
  const idleImage = imageOf(idleDeployment, tool);
  const image = kind === "release" ? withTag(liveImage, tag!) : idleImage;
  if (kind === "release" && image === liveImage) throw new ReleaseRefused(`${tool} already runs ${liveImage}`);
  if (kind === "rollback" && idleImage === liveImage)
    throw new ReleaseRefused(`nothing to roll back to: ${idleName} runs the live image ${liveImage}`);
  const hpa = find<HorizontalPodAutoscaler>(objects, "HorizontalPodAutoscaler", tool);
  const replicas = active.spec?.replicas ?? hpa?.spec?.minReplicas ?? 1;
  const containerPath = `/spec/template/spec/containers/${containerIndex(idleDeployment, tool)}/image`;
  // A release gives the new colour's pod template a label of its own: new pods, in a ReplicaSet of
  // their own, that the gate alone selects.
  const newPods = { colour: idle, release: Date.now().toString(36) };
  const releaseLabelPath = `/spec/template/metadata/labels/${RELEASE_LABEL.replace("/", "~1")}`;

  // The same flip back as `--rollback`, ungated, from the objects as the steps before a failure leave them.
  const flipBack: Undo = {
    plan: (undo) => planPlain(undo, undo.current(), spec, "rollback", undefined, undefined, true),
    undone: `rolled back: ${tool} selects the ${activeColour} pods again and ${idleName} is scaled to zero`,
  };
  const driver: BlueGreenDriver<void> = {
    start() {
      builder.patch(
        "Deployment",
        idleName,
        `${idleName}: ${kind === "release" ? `image ${image}, pods labelled ${RELEASE_LABEL}=${newPods.release}, ` : ""}${replicas} replica(s), as many as ${activeName} runs`,
        [
          { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: idle },
          { op: "test", path: containerPath, value: idleImage },
          ...(image === idleImage ? [] : [{ op: "replace" as const, path: containerPath, value: image }]),
          ...(kind === "release" ? [{ op: "add" as const, path: releaseLabelPath, value: newPods.release }] : []),
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
    },
    gate(when) {
      if (when === "before the flip") {
        builder.gate(spec, gate!, "before the flip", previewServiceName(tool), newPods, image, {
          plan: (undo) =>
            undo.patch("Deployment", idleName, `scale ${idleName} back to zero: it failed the gate`, [
              { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: idle },
              { op: "add", path: "/spec/replicas", value: 0 },
            ]),
          undone: `${idleName} is scaled back to zero and ${activeName} stays live`,
        });
        return;
      }
      builder.gate(spec, gate!, "after the flip", tool, newPods, image, flipBack);
      // Judged: a failure from here on leaves the new colour live, as a passed release does.
      builder.undoFromHere(undefined);
    },
    flip() {
      builder.patch("Service", tool, `flip: ${tool} selects the ${idle} pods`, [
        { op: "test", path: `/spec/selector/${COLOUR_LABEL}`, value: activeColour },
        { op: "replace", path: `/spec/selector/${COLOUR_LABEL}`, value: idle },
      ]);
      // The new colour is live and not judged yet: any step that fails from here until the gate
      // after the flip has passed flips back (a gated release; a rollback's undo would be a release).
      if (gate) builder.undoFromHere(flipBack);
      // A flip back from the middle of a release skips what the release had not changed yet.
      const preview = find<Service>(objects, "Service", previewServiceName(tool));
      if (preview && !(midway && preview.spec?.selector?.[COLOUR_LABEL] === activeColour)) {
        builder.patch(
          "Service",
          previewServiceName(tool),
          `${previewServiceName(tool)} selects the ${activeColour} pods, for a check before scale-down`,
          [
            { op: "test", path: `/spec/selector/${COLOUR_LABEL}`, value: idle },
            { op: "replace", path: `/spec/selector/${COLOUR_LABEL}`, value: activeColour },
          ],
        );
      }
      if (hpa && !(midway && hpa.spec?.scaleTargetRef.name === idleName)) {
        builder.patch("HorizontalPodAutoscaler", tool, `the autoscaler scales ${idleName}`, [
          { op: "test", path: "/spec/scaleTargetRef/name", value: activeName },
          { op: "replace", path: "/spec/scaleTargetRef/name", value: idleName },
        ]);
      }
    },
    clientsMove() {
      builder.wait(
        "Deployment",
        activeName,
        `${activeName} stays up ${SCALE_DOWN_DELAY_SECONDS} s while clients resolve ${tool} again (max connection age)`,
        "delay",
        ["sleep", String(SCALE_DOWN_DELAY_SECONDS)],
        SCALE_DOWN_DELAY_SECONDS,
      );
    },
    drain() {
      builder.patch(
        "Deployment",
        activeName,
        `scale ${activeName} to zero: preStop, then SIGTERM drains calls in flight (\`pnpm release ${tool} --k8s --rollback\` scales it up again)`,
        [
          { op: "test", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: activeColour },
          { op: "add", path: "/spec/replicas", value: 0 },
        ],
      );
    },
  };
  planBlueGreen(driver, gate !== undefined);
  return {
    tool,
    kind,
    path: "plain-blue-green",
    from: { colour: activeColour, image: liveImage, objects: [`deployment/${activeName}`] },
    to: { colour: idle, image, objects: [`deployment/${idleName}`] },
  };
}
