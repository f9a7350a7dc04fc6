// Namespaces are the overlay's to choose: the suite's own (`namespace:`) and the ones outside it
// (names.yaml). Renders the prod overlay with every optional component under other names and
// checks that no object keeps a default, and that nothing but the names moved.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { type K8sObject, kustomize } from "../src/manifests/renderings.js";
import { RELEASE_COMPONENTS } from "../src/manifests/generated-components.js";
import { NAMESPACE } from "../src/manifests/cluster-names.js";
import { NAMES_FILE, OUTSIDE_NAMESPACES } from "../src/manifests/namespace-replacements.js";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const OPTIONAL = ["chaos-drills", "cloudnative-pg", "llm-egress", "oidc-egress", "patrol"];
/** Default → the name this test gives it. */
const RENAMED: Record<string, string> = {
  [NAMESPACE]: "team-a",
  ...Object.fromEntries(Object.values(OUTSIDE_NAMESPACES).map((ns) => [ns, `${ns}-elsewhere`])),
};

const scratch = mkdtempSync(join(tmpdir(), "loopguard-names-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** deploy/k8s copied, the prod overlay given `components`, and, when `rename`, every namespace renamed. */
function render(components: readonly string[], rename: boolean): readonly K8sObject[] {
  const root = mkdtempSync(join(scratch, "k8s-"));
  cpSync(join(repoRoot, "deploy", "k8s"), root, { recursive: true });
  const overlay = join(root, "overlays", "prod");
  const kustomization = join(overlay, "kustomization.yaml");
  let text = readFileSync(kustomization, "utf8").replace(
    "components:\n",
    `components:\n${components.map((c) => `  - ../../components/${c}\n`).join("")}`,
  );
  if (rename) {
    text = text.replace(`namespace: ${NAMESPACE}\n`, `namespace: ${RENAMED[NAMESPACE]}\n`);
    let names = readFileSync(join(overlay, NAMES_FILE), "utf8");
    for (const [key, ns] of Object.entries(OUTSIDE_NAMESPACES))
      names = names.replace(`${key}: ${ns}\n`, `${key}: ${RENAMED[ns]}\n`);
    writeFileSync(join(overlay, NAMES_FILE), names);
  }
  writeFileSync(kustomization, text);
  return kustomize(overlay).objects;
}

/** Every string in `value` with its path, keys included (labels are keys too). */
function strings(value: unknown, path = ""): [string, string][] {
  if (typeof value === "string") return [[path, value]];
  if (Array.isArray(value)) return value.flatMap((v, i) => strings(v, `${path}[${i}]`));
  if (typeof value === "object" && value !== null)
    return Object.entries(value).flatMap(([k, v]) => [
      [`${path}{key}`, k] as [string, string],
      ...strings(v, `${path}.${k}`),
    ]);
  return [];
}

/** The value with every renamed namespace put back to its default, where it stands as a name. */
function putBack(value: unknown): unknown {
  let json = JSON.stringify(value);
  for (const [ns, renamed] of Object.entries(RENAMED))
    json = json.replace(new RegExp(`(?<=["./=])${renamed}(?=["./,:]|$)`, "g"), ns);
  return JSON.parse(json);
}

describe.each(RELEASE_COMPONENTS)("the prod overlay with %s and every optional component", (release) => {
  const components = [release, ...OPTIONAL];
  const renamed = render(components, true);

  it("puts every object in the overlay's namespace, service accounts bound there too", () => {
    expect(renamed.find((o) => o.kind === "Namespace")?.metadata.name).toBe("team-a");
    for (const object of renamed.filter(
      (o) => o.kind !== "Namespace" && o.kind !== "ClusterRole" && o.kind !== "ClusterRoleBinding",
    )) {
      expect(object.metadata.namespace, `${object.kind} ${object.metadata.name}`).toBe("team-a");
    }
    const subjects = renamed.flatMap((o) =>
      ((o as { subjects?: { kind: string; namespace?: string }[] }).subjects ?? []).filter(
        (s) => s.kind === "ServiceAccount",
      ),
    );
    for (const subject of subjects) expect(subject.namespace).toBe("team-a");
  });

  it("keeps no default namespace in any name, address or selector", () => {
    const defaults = Object.keys(RENAMED);
    const left = renamed.flatMap((object) =>
      strings(object)
        .filter(([, s]) => defaults.some((ns) => s === ns || s.includes(`.${ns}.svc`) || s.includes(`.${ns}:`)))
        // Keys are field and label names; the product's name as a label value or a database name is no namespace.
        .filter(
          ([path, s]) =>
            !path.endsWith("{key}") && !(s === NAMESPACE && /labels\.|initdb\.(database|owner)$/i.test(path)),
        )
        .map(([path, s]) => `${object.kind} ${object.metadata.name} ${path}: ${s}`),
    );
    expect(left).toEqual([]);
    const prometheusPeers = renamed
      .filter((o) => o.kind === "NetworkPolicy")
      .flatMap((o) =>
        strings(o).filter(([path]) => path.endsWith("namespaceSelector.matchLabels.kubernetes.io/metadata.name")),
      );
    expect(prometheusPeers.map(([, s]) => s)).toContain(RENAMED[OUTSIDE_NAMESPACES["prometheus-namespace"]]);
  });

  it("changes nothing but the names", () => {
    expect(putBack(renamed)).toEqual(render(components, false));
  });
});
