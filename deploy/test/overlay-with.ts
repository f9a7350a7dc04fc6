// An overlay with more components, rendered as a person would add them: in the overlay's own
// `components:` list, so its `images:` and other transformers reach the components' objects too
// (check:k8s's renderOnProd layers them on top of the rendered overlay, where they do not).
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { type Rendering, kustomize } from "../src/manifests/renderings.js";
import { COMPONENTS_DIR, OVERLAYS_DIR } from "../src/manifests/generated-components.js";
import { parseYamlDocuments, toYaml } from "../src/manifests/yaml.js";

export function renderOverlayWith(root: string, overlay: string, components: readonly string[]): Rendering {
  const dir = join(root, OVERLAYS_DIR, overlay);
  const scratch = mkdtempSync(join(tmpdir(), "loopguard-overlay-"));
  try {
    // Its own files (generators' inputs, patches) beside it; what lies outside it named from the copy.
    cpSync(dir, scratch, { recursive: true });
    const [kustomization] = parseYamlDocuments(readFileSync(join(dir, "kustomization.yaml"), "utf8"), overlay) as [
      Record<string, unknown>,
    ];
    const outside = (path: string) => {
      const absolute = resolve(dir, path);
      return relative(dir, absolute).startsWith("..") ? relative(scratch, absolute) : path;
    };
    const listed = (key: string) => ((kustomization[key] as string[] | undefined) ?? []).map(outside);
    const added = components.map((name) => relative(scratch, join(root, COMPONENTS_DIR, name)));
    writeFileSync(
      join(scratch, "kustomization.yaml"),
      toYaml({ ...kustomization, resources: listed("resources"), components: [...listed("components"), ...added] }),
    );
    return kustomize(scratch, `overlays/${overlay} with ${components.join(", ")}`);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
