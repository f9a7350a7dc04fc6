// What a release leaves in the cluster that applying the overlay must not undo, kept in the overlay
// itself: `pnpm release --k8s --overlay DIR` writes DIR/release-state/, a kustomize Component of
// strategic-merge patches, one file per tool, to be committed. On the plain path they hold which
// colour the tool's Service (and the preview) select, the Deployment the autoscaler scales, the
// idle colour at its live count (zero) and the active one with no count at all (the autoscaler's,
// or the release's: a server-side apply leaves a field it does not send to its owner), and each
// colour's image; on Argo the image of the Deployment the Rollout takes its template from (the
// Rollout, its ReplicaSets and its Services' pod-hash selectors are the controller's). A small
// file a reviewer reads in the release's commit, instead of state only the cluster knows.
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { Service } from "kubernetes-types/core/v1.js";
import { componentsOf, type K8sObject, kustomize } from "../manifests/renderings.js";
import { COLOUR_LABEL, COLOURS, colourDeploymentName, previewServiceName } from "../manifests/release-objects.js";
import { toYaml, toYamlDocuments } from "../manifests/yaml.js";
import { ReleaseRefused } from "./contract-gate.js";
import { find, type K8sPlan, type Objects } from "./k8s-plan-steps.js";

/** The Component's folder inside the overlay; the overlay lists it after its release path. */
export const RELEASE_STATE_DIR = "release-state";
const HEADER = [
  "Written by `pnpm release <tool> --k8s --overlay` after each release: what the cluster runs, so that",
  "`kubectl apply -k` of this overlay keeps it. Commit it with the release; do not edit.",
];

/** The objects as the plan's patches leave them. */
export function afterPlan(objects: Objects, plan: K8sPlan): K8sObject[] {
  const last = new Map(
    plan.steps.flatMap((s) => (s.action === "patch" ? [[`${s.kind}/${s.name}`, s.result] as const] : [])),
  );
  return objects.map((o) => last.get(`${o.kind}/${o.metadata.name}`) ?? o);
}

function images(deployment: Deployment): { name: string; image: string }[] {
  return deployment.spec!.template.spec!.containers.map((c) => ({ name: c.name, image: c.image! }));
}

function patch(kind: string, apiVersion: string, object: K8sObject, spec: object): object {
  return { apiVersion, kind, metadata: { name: object.metadata.name, namespace: object.metadata.namespace }, spec };
}

/** The patches that make a rendering hold the tool's release state as `objects` (the cluster's) have it. */
export function statePatches(objects: Objects, tool: string): object[] {
  const template = find<Deployment>(objects, "Deployment", tool);
  if (find(objects, "Rollout", tool) && template)
    return [patch("Deployment", "apps/v1", template, { template: { spec: { containers: images(template) } } })];
  const service = find<Service>(objects, "Service", tool)!;
  const active = service.spec!.selector![COLOUR_LABEL];
  const patches: object[] = [patch("Service", "v1", service, { selector: service.spec!.selector })];
  const preview = find<Service>(objects, "Service", previewServiceName(tool));
  if (preview) patches.push(patch("Service", "v1", preview, { selector: preview.spec!.selector }));
  const hpa = find<HorizontalPodAutoscaler>(objects, "HorizontalPodAutoscaler", tool);
  if (hpa)
    patches.push(
      patch("HorizontalPodAutoscaler", "autoscaling/v2", hpa, {
        scaleTargetRef: { name: hpa.spec!.scaleTargetRef.name },
      }),
    );
  for (const colour of COLOURS) {
    const deployment = find<Deployment>(objects, "Deployment", colourDeploymentName(tool, colour))!;
    const replicas = colour === active ? null : (deployment.spec!.replicas ?? 0);
    patches.push(
      patch("Deployment", "apps/v1", deployment, { replicas, template: { spec: { containers: images(deployment) } } }),
    );
  }
  return patches;
}

/** Whether the overlay's kustomization lists the release-state Component. */
export function overlayKeepsState(overlayDir: string): boolean {
  return componentsOf(join(overlayDir, "kustomization.yaml")).includes(resolve(overlayDir, RELEASE_STATE_DIR));
}

/** Writes (or rewrites) the tool's state file and the Component listing every tool's. */
export function writeReleaseState(overlayDir: string, tool: string, patches: readonly object[]): string {
  const dir = join(overlayDir, RELEASE_STATE_DIR);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${tool}.yaml`), toYamlDocuments(patches, HEADER));
  const files = readdirSync(dir)
    .filter((name) => name.endsWith(".yaml") && name !== "kustomization.yaml")
    .sort();
  writeFileSync(
    join(dir, "kustomization.yaml"),
    toYaml(
      { apiVersion: "kustomize.config.k8s.io/v1alpha1", kind: "Component", patches: files.map((path) => ({ path })) },
      HEADER,
    ),
  );
  return join(dir, `${tool}.yaml`);
}

/**
 * Refuses, before any change, an overlay that would not keep the release: one without a
 * kustomization, or whose kustomization does not list the release-state Component (then written
 * from the live objects, so the Component it is told to list exists and says what runs).
 */
export function checkOverlay(overlayDir: string, given: string, live: Objects, tool: string): void {
  if (!existsSync(join(overlayDir, "kustomization.yaml")))
    throw new ReleaseRefused(
      `${given} has no kustomization.yaml: --overlay names the kustomization the cluster is applied from`,
    );
  if (overlayKeepsState(overlayDir)) return;
  const file = relative(process.cwd(), writeReleaseState(overlayDir, tool, statePatches(live, tool)));
  throw new ReleaseRefused(
    `${given}/kustomization.yaml does not list the component ${RELEASE_STATE_DIR}: add it after the release path (components: [..., ${RELEASE_STATE_DIR}]), commit ${file} (written now: what runs) and release again`,
  );
}

/** Writes the state the release left into the overlay, then renders the overlay and proves a re-apply keeps it. */
export function recordState(overlayDir: string, given: string, after: Objects, tool: string): string {
  const file = writeReleaseState(overlayDir, tool, statePatches(after, tool));
  const moves = reapplyMoves(kustomize(overlayDir, given).objects, after, tool);
  if (moves.length > 0)
    throw new ReleaseRefused(
      `released and recorded in ${file}, but applying ${given} would still move ${moves.length} field(s): ${moves[0]}`,
      moves.join("\n"),
    );
  return file;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * What applying `rendered` would change among the fields a release sets (Service selectors, the
 * autoscaler's target and bounds, replica counts, images), as one line each; a count the rendering
 * leaves out stays with its owner.
 */
export function reapplyMoves(rendered: Objects, live: Objects, tool: string): string[] {
  const moves: string[] = [];
  const ofTool = (o: K8sObject) => o.metadata.labels?.["app.kubernetes.io/name"] === tool;
  for (const object of rendered.filter(ofTool)) {
    const current = find<Record<string, unknown>>(live, object.kind, object.metadata.name);
    if (!current) continue;
    const check = (field: string, want: unknown, have: unknown) => {
      if (want !== undefined && !same(want, have))
        moves.push(
          `${object.kind} ${object.metadata.name} ${field}: ${JSON.stringify(have)} → ${JSON.stringify(want)}`,
        );
    };
    const [spec, liveSpec] = [object.spec as Record<string, never>, current.spec as Record<string, never>];
    if (object.kind === "Service") check("spec.selector", spec.selector, liveSpec.selector);
    if (object.kind === "HorizontalPodAutoscaler") {
      for (const field of ["scaleTargetRef", "minReplicas", "maxReplicas"])
        check(`spec.${field}`, spec[field], liveSpec[field]);
    }
    if (object.kind === "Deployment") {
      check("spec.replicas", spec.replicas, liveSpec.replicas);
      check("images", images(object as unknown as Deployment), images(current as unknown as Deployment));
    }
  }
  return moves;
}
