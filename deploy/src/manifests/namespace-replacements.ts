// The namespaces the suite's objects name, and how an overlay changes them. The suite's own is
// the overlay's `namespace:`: objects address each other by short Service names (resolved through
// the pod's DNS search path), and the few strings that must spell it out (a certificate's DNS
// names) take the renamed Namespace's name through a replacement. The other namespaces (Prometheus's, the CloudNativePG operator's) are keys of a
// ConfigMap each overlay holds (names.yaml, never applied: local-config); kustomize carries
// them into every object through the replacements `pnpm gen` writes beside it. The replacements
// are found by reading every object the base and components declare, so a new object that names
// one of these namespaces is covered without a list to keep.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { COMPONENTS_DIR, GENERATED_COMPONENTS, K8S_DIR, OVERLAYS_DIR } from "./generated-components.js";
import { CNPG_OPERATOR_NAMESPACE, NAMESPACE, NAMESPACE_NAME_LABEL, PROMETHEUS_NAMESPACE } from "./cluster-names.js";
import { type YamlValue, parseYamlDocuments } from "./yaml.js";

/** The ConfigMap in each overlay whose keys name the namespaces outside the suite. */
export const NAMES_CONFIG_MAP = "loopguard-names";
export const NAMES_FILE = "names.yaml";
export const NAMES_REPLACEMENTS_FILE = "names.replacements.yaml";

/** Key of the names ConfigMap → the namespace the objects are written with. */
export const OUTSIDE_NAMESPACES = {
  "prometheus-namespace": PROMETHEUS_NAMESPACE,
  "cnpg-operator-namespace": CNPG_OPERATOR_NAMESPACE,
} as const;

interface Target {
  readonly select: { readonly kind: string; readonly name: string };
  readonly fieldPaths: string[];
  readonly options?: { readonly delimiter: string; readonly index: number };
}

/** A map key as a kustomize field path segment: keys with dots or slashes go in brackets. */
function keySegment(key: string): string {
  return /[./[\]]/.test(key) ? `[${key}]` : key;
}

/** A list element as a segment: by its name when it has one (stable under patches), else by index. */
function elementSegment(element: YamlValue, index: number): string {
  const name =
    typeof element === "object" && element !== null && !Array.isArray(element)
      ? (element as Record<string, YamlValue>).name
      : undefined;
  return typeof name === "string" ? `[name=${name}]` : String(index);
}

/** Where `value` (a whole label value, or the namespace part of a `<service>.<namespace>.svc` name) appears in `node`. */
function occurrences(
  node: YamlValue,
  namespace: string,
  path: readonly string[],
  key: string | undefined,
  found: { path: string; index?: number }[],
): void {
  if (typeof node === "string") {
    if (key === NAMESPACE_NAME_LABEL && node === namespace) found.push({ path: path.join(".") });
    const at = node.indexOf(`.${namespace}.svc`);
    if (at >= 0) found.push({ path: path.join("."), index: node.slice(0, at + 1).split(".").length - 1 });
    return;
  }
  if (Array.isArray(node)) {
    for (const [i, element] of (node as readonly YamlValue[]).entries())
      occurrences(element, namespace, [...path, elementSegment(element, i)], undefined, found);
    return;
  }
  if (typeof node === "object" && node !== null) {
    for (const [k, v] of Object.entries(node)) occurrences(v, namespace, [...path, keySegment(k)], k, found);
  }
}

/** Where each name comes from in the overlay: the suite's own namespace after `namespace:`, the others from names.yaml. */
function sources(): { namespace: string; source: object }[] {
  return [
    { namespace: NAMESPACE, source: { kind: "Namespace", fieldPath: "metadata.name" } },
    ...Object.entries(OUTSIDE_NAMESPACES).map(([key, namespace]) => ({
      namespace,
      source: { kind: "ConfigMap", name: NAMES_CONFIG_MAP, fieldPath: `data.${key}` },
    })),
  ];
}

/** The replacements of every namespace an object names, over `objects` (what the base and components declare). */
export function namesReplacements(objects: readonly YamlValue[]): object[] {
  return sources().flatMap(({ namespace, source }) => {
    const targets = new Map<string, Target>();
    for (const object of objects) {
      if (typeof object !== "object" || object === null || Array.isArray(object)) continue;
      const { kind, metadata } = object as { kind?: string; metadata?: { name?: string } };
      if (typeof kind !== "string" || typeof metadata?.name !== "string") continue;
      const found: { path: string; index?: number }[] = [];
      for (const [k, v] of Object.entries(object))
        if (k !== "metadata") occurrences(v, namespace, [keySegment(k)], k, found);
      for (const { path, index } of found) {
        const id = `${kind}/${metadata.name}/${path}/${index ?? ""}`;
        const options = index === undefined ? {} : { options: { delimiter: ".", index } };
        targets.set(id, { select: { kind, name: metadata.name }, fieldPaths: [path], ...options });
      }
    }
    return targets.size === 0 ? [] : [{ source, targets: [...targets.values()] }];
  });
}

/**
 * The objects of the base and of every component: what their kustomizations declare as resources
 * (folders followed), read from `generated` (path → YAML about to be written) where gen owns the
 * file, else from the committed file.
 */
export function declaredObjects(repoRoot: string, generated: ReadonlyMap<string, string>): YamlValue[] {
  const read = (path: string) => generated.get(path) ?? readFileSync(join(repoRoot, path), "utf8");
  const isFile = (path: string) => generated.has(path) || statSync(join(repoRoot, path)).isFile();
  const resourceFiles = (dir: string): string[] => {
    const own = join(dir, "kustomization.yaml");
    if (!generated.has(own) && !existsSync(join(repoRoot, own))) return [];
    const [declared] = parseYamlDocuments(read(own), own) as { resources?: string[] }[];
    return (declared?.resources ?? []).flatMap((resource) => {
      const path = join(dir, resource);
      return isFile(path) ? [path] : resourceFiles(path);
    });
  };
  const components = [...new Set([...readdirSync(join(repoRoot, COMPONENTS_DIR)), ...GENERATED_COMPONENTS])].map(
    (name) => join(COMPONENTS_DIR, name),
  );
  return [join(K8S_DIR, "base"), ...components]
    .flatMap(resourceFiles)
    .flatMap((path) => parseYamlDocuments(read(path), path) as YamlValue[]);
}

/** Every overlay's replacements file, path relative to the repository root → the objects to write. */
export function overlayNamesFiles(repoRoot: string, generated: ReadonlyMap<string, string>): Map<string, object[]> {
  const replacements = namesReplacements(declaredObjects(repoRoot, generated));
  const overlays = readdirSync(join(repoRoot, OVERLAYS_DIR)).filter((name) =>
    existsSync(join(repoRoot, OVERLAYS_DIR, name, "kustomization.yaml")),
  );
  return new Map(overlays.map((name) => [join(OVERLAYS_DIR, name, NAMES_REPLACEMENTS_FILE), replacements]));
}
