// `pnpm check:k8s`'s re-apply check, per release path: an overlay of prod + the path + its
// release-state, every tool released (planned against the rendering, the patches applied in
// memory) and recorded as `pnpm release --k8s --overlay` records it, then the overlay rendered
// again: applying it must move none of the fields a release sets. deploy/test/release-reapply.test.ts
// does the same through the recording kubectl, with rollbacks and every field compared.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { type K8sObject, kustomize } from "../manifests/renderings.js";
import { COMPONENTS_DIR, OVERLAYS_DIR, RELEASE_COMPONENTS } from "../manifests/generated-components.js";
import { NAMESPACE } from "../manifests/cluster-names.js";
import { planK8sRelease } from "./k8s.js";
import { afterPlan, RELEASE_STATE_DIR, reapplyMoves, statePatches, writeReleaseState } from "./k8s-state.js";

/** What a re-apply would move after a release of every tool, per release path; empty when nothing. */
export function checkReapply(
  repoRoot: string,
  services: readonly ServiceSpec[],
): { checked: string[]; moves: string[] } {
  const tools = services.filter((s) => s.kind === "tool");
  const checked: string[] = [];
  const moves: string[] = [];
  for (const path of RELEASE_COMPONENTS) {
    const dir = mkdtempSync(join(tmpdir(), "loopguard-reapply-"));
    try {
      const components = [relative(dir, join(repoRoot, COMPONENTS_DIR, path)), RELEASE_STATE_DIR];
      const kustomization = (withState: boolean) =>
        `resources: [${JSON.stringify(relative(dir, join(repoRoot, OVERLAYS_DIR, "prod")))}]\ncomponents: ${JSON.stringify(withState ? components : components.slice(0, 1))}\n`;
      writeFileSync(join(dir, "kustomization.yaml"), kustomization(false));
      const before = kustomize(dir, `prod + ${path}`).objects;
      const live: K8sObject[] = [];
      for (const spec of tools) {
        const objects = before.filter((o) => o.metadata.labels?.["app.kubernetes.io/name"] === spec.name);
        const after = afterPlan(
          objects,
          planK8sRelease({ objects, spec, namespace: NAMESPACE, kind: "release", tag: "reapply-check" }),
        );
        writeReleaseState(dir, spec.name, statePatches(after, spec.name));
        live.push(...after);
      }
      writeFileSync(join(dir, "kustomization.yaml"), kustomization(true));
      const again = kustomize(dir, `prod + ${path} + ${RELEASE_STATE_DIR}`).objects;
      for (const spec of tools) {
        moves.push(...reapplyMoves(again, live, spec.name).map((move) => `${path}: ${move}`));
        checked.push(`${path}/${spec.name}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return { checked, moves };
}
