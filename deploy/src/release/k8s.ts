// A blue-green release of one tool on Kubernetes, through whichever release path is deployed:
// argo-rollouts (k8s-argo.ts: the Rollout's controller runs the release and its analysis) or
// plain-blue-green (k8s-plain.ts: the blue-green model's phases as patches, waits and gates).
// The plan is computed from the live objects (kubectl, or a `kubectl kustomize` rendering for a
// review without a cluster) as JSON patches guarded by `test` operations, so a concurrent change
// fails the patch rather than being overwritten; `--dry-run` shows each patch and the object it
// produces, and the tests validate those objects strictly.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { K8sObject } from "../manifests/renderings.js";
import type { ReleasePath } from "../manifests/generated-components.js";
import { COLOURS, colourDeploymentName } from "../manifests/release-objects.js";
import { WAIT_FOR_SCHEMA } from "../manifests/migration-objects.js";
import { ReleaseRefused } from "./contract-gate.js";
import type { ReleaseGate } from "./gate.js";
import { planArgo } from "./k8s-argo.js";
import { find, type K8sPlan, type Objects, PlanBuilder } from "./k8s-plan-steps.js";
import { planPlain } from "./k8s-plain.js";
import type { ReleaseKind } from "./result.js";

export {
  FIELD_MANAGER,
  type GateStep,
  type K8sPlan,
  type MigrateStep,
  type PatchStep,
  type Step,
  type WaitStep,
  withTag,
} from "./k8s-plan-steps.js";

/** Which release path serves the tool; refuses a tool deployed without one. */
export function releasePathOf(objects: Objects, tool: string): ReleasePath {
  if (find(objects, "Rollout", tool)) return "argo-rollouts";
  if (COLOURS.every((colour) => find(objects, "Deployment", colourDeploymentName(tool, colour))))
    return "plain-blue-green";
  throw new ReleaseRefused(
    `${tool} is deployed without a release path: add deploy/k8s/components/argo-rollouts (clusters with Argo Rollouts) or deploy/k8s/components/plain-blue-green to the overlay`,
  );
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
