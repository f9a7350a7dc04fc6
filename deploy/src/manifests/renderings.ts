// Offline checks of the Kubernetes manifests, with no cluster: render every overlay with
// `kubectl kustomize` (and each optional component on top of prod), then validate every object
// strictly. Objects of a typed API become `const … = {…} satisfies <Type>` in a TypeScript file
// that `tsc --noEmit` compiles (kubernetes-types for the built-in APIs, kubernetes-models for
// prometheus-operator and Argo Rollouts): an unknown or misspelled field, a wrong type or a
// missing required field is a compile error. Custom resources no package types are checked
// against a strict JSON Schema with ajv. An object of any other kind is an error too.
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv, type ErrorObject } from "ajv";
import { CRD_SCHEMAS } from "./crd-schemas.js";
import { COMPONENTS_DIR, OVERLAYS_DIR, RELEASE_COMPONENTS } from "./generated-components.js";
import { parseYamlDocuments } from "./yaml.js";

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface K8sObject {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: { readonly name: string; readonly namespace?: string; readonly labels?: Record<string, string> };
  readonly [field: string]: unknown;
}

/** The objects one kustomization renders to; `name` says which (e.g. "overlays/prod"). */
export interface Rendering {
  readonly name: string;
  readonly objects: readonly K8sObject[];
}

export interface ObjectError {
  /** The rendering's name, e.g. "overlays/prod". */
  readonly rendering: string;
  /** "overlays/prod Deployment loopguard/kb-search" */
  readonly object: string;
  readonly message: string;
}

export function describeObject(rendering: string, object: K8sObject): string {
  const namespace = object.metadata?.namespace ? `${object.metadata.namespace}/` : "";
  return `${rendering} ${object.kind} ${namespace}${object.metadata?.name}`;
}

function isObject(value: unknown): value is K8sObject {
  if (typeof value !== "object" || value === null) return false;
  const { apiVersion, kind, metadata } = value as Record<string, unknown>;
  return (
    typeof apiVersion === "string" && typeof kind === "string" && typeof metadata === "object" && metadata !== null
  );
}

/** Runs `kubectl kustomize dir`; a failure says what kustomize said, in one line. */
export function kustomize(dir: string, name = dir): Rendering {
  const result = spawnSync("kubectl", ["kustomize", dir], {
    encoding: "utf8",
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (result.error) throw new Error(`kubectl kustomize ${name}: ${result.error.message} (kubectl is needed on PATH)`);
  if (result.status !== 0)
    throw new Error(`kubectl kustomize ${name} failed: ${result.stderr.trim().replaceAll("\n", " ")}`);
  const documents = parseYamlDocuments(result.stdout, name);
  const invalid = documents.findIndex((document) => !isObject(document));
  if (invalid >= 0) throw new Error(`${name}: document ${invalid + 1} has no apiVersion, kind and metadata`);
  return { name, objects: documents as K8sObject[] };
}

/** The components a kustomization file lists, as absolute paths. */
export function componentsOf(kustomizationFile: string): string[] {
  const [document] = parseYamlDocuments(readFileSync(kustomizationFile, "utf8"), kustomizationFile) as [
    { components?: string[] } | undefined,
  ];
  return (document?.components ?? []).map((path) => resolve(dirname(kustomizationFile), path));
}

/**
 * Every overlay; each component no overlay uses, rendered on top of the prod overlay; and each
 * release path (argo-rollouts, plain-blue-green: one at a time) together with every other optional
 * component, so everything shipped under deploy/k8s is rendered and checked, alone and combined.
 */
export function renderAll(repoRoot: string): Rendering[] {
  const overlaysDir = join(repoRoot, OVERLAYS_DIR);
  const componentsDir = join(repoRoot, COMPONENTS_DIR);
  const overlays = readdirSync(overlaysDir)
    .filter((name) => existsSync(join(overlaysDir, name, "kustomization.yaml")))
    .sort();
  const used = new Set(overlays.flatMap((name) => componentsOf(join(overlaysDir, name, "kustomization.yaml"))));
  const renderings = overlays.map((name) => kustomize(join(overlaysDir, name), `overlays/${name}`));
  const optional = readdirSync(componentsDir)
    .filter((name) => !used.has(join(componentsDir, name)))
    .sort();
  const releases = optional.filter((name) => (RELEASE_COMPONENTS as readonly string[]).includes(name));
  const others = optional.filter((name) => !releases.includes(name));
  const combinations = [
    ...optional.map((name) => [name]),
    ...(others.length > 0 ? releases.map((release) => [release, ...others]) : []),
  ];
  return [...renderings, ...combinations.map((components) => renderOnProd(overlaysDir, componentsDir, components))];
}

/** The prod overlay with `components` added, rendered through a throwaway overlay in a temporary folder. */
export function renderOnProd(overlaysDir: string, componentsDir: string, components: readonly string[]): Rendering {
  // kustomize takes no absolute paths to other kustomizations: the throwaway overlay names them relatively.
  const scratch = mkdtempSync(join(tmpdir(), "loopguard-kustomize-"));
  try {
    writeFileSync(
      join(scratch, "kustomization.yaml"),
      [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        `resources: [${JSON.stringify(relative(scratch, join(overlaysDir, "prod")))}]`,
        `components: [${components.map((name) => JSON.stringify(relative(scratch, join(componentsDir, name)))).join(", ")}]`,
        "",
      ].join("\n"),
    );
    return kustomize(scratch, ["overlays/prod", ...components.map((name) => `components/${name}`)].join(" + "));
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** TypeScript types of the typed APIs: modules of kubernetes-types by API group, then the CRD models. */
const KUBERNETES_TYPES_GROUPS: Readonly<Record<string, string>> = {
  "": "core",
  apps: "apps",
  autoscaling: "autoscaling",
  batch: "batch",
  policy: "policy",
  "networking.k8s.io": "networking",
  "rbac.authorization.k8s.io": "rbac",
};
const MODEL_TYPES: Readonly<Record<string, { readonly module: string; readonly type: string }>> = {
  "monitoring.coreos.com/v1/ServiceMonitor": {
    module: "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor",
    type: "IServiceMonitor",
  },
  "monitoring.coreos.com/v1/PodMonitor": {
    module: "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor",
    type: "IPodMonitor",
  },
  "monitoring.coreos.com/v1/PrometheusRule": {
    module: "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule",
    type: "IPrometheusRule",
  },
  "argoproj.io/v1alpha1/Rollout": {
    module: "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout",
    type: "IRollout",
  },
  "argoproj.io/v1alpha1/AnalysisTemplate": {
    module: "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/AnalysisTemplate",
    type: "IAnalysisTemplate",
  },
};

/** "apiVersion/Kind" of every custom resource the check knows, so the docs can list what each needs installed. */
export const CUSTOM_KINDS: readonly string[] = [...Object.keys(MODEL_TYPES), ...Object.keys(CRD_SCHEMAS)];

function typeOf(object: K8sObject): { module: string; type: string } | undefined {
  const model = MODEL_TYPES[`${object.apiVersion}/${object.kind}`];
  if (model) return model;
  const [group, version] = object.apiVersion.includes("/") ? object.apiVersion.split("/") : ["", object.apiVersion];
  const folder = KUBERNETES_TYPES_GROUPS[group!];
  return folder ? { module: `kubernetes-types/${folder}/${version}`, type: object.kind } : undefined;
}

interface Located {
  readonly rendering: string;
  readonly object: string;
  readonly firstLine: number;
  readonly lastLine: number;
}

/** Compiles the objects as `satisfies` constants; returns tsc's errors, each mapped back to its object. */
interface TypedObject {
  readonly rendering: string;
  readonly object: string;
  readonly value: K8sObject;
  readonly type: { readonly module: string; readonly type: string };
}

function typeCheck(items: readonly TypedObject[]): ObjectError[] {
  if (items.length === 0) return [];
  const modules = [...new Set(items.map((item) => item.type.module))];
  const alias = new Map(modules.map((module, index) => [module, `T${index}`]));
  const lines = modules.map((module) => `import type * as ${alias.get(module)} from ${JSON.stringify(module)};`);
  const located: Located[] = [];
  items.forEach((item, index) => {
    const firstLine = lines.length + 1;
    const constant = `export const o${index} = ${JSON.stringify(item.value, null, 2)} satisfies ${alias.get(item.type.module)}.${item.type.type};`;
    lines.push(`// ${item.object}`, ...constant.split("\n"));
    located.push({ rendering: item.rendering, object: item.object, firstLine, lastLine: lines.length });
  });
  // Inside this package's node_modules, so the type packages resolve as they do for its code.
  const dir = join(packageDir, "node_modules", ".cache", "loopguard-k8s-check", randomUUID());
  mkdirSync(dir, { recursive: true });
  try {
    writeFileSync(join(dir, "objects.ts"), `${lines.join("\n")}\n`);
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: "ES2022",
          module: "ESNext",
          moduleResolution: "Bundler",
          skipLibCheck: true,
          types: [],
        },
        files: ["objects.ts"],
      }),
    );
    const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
    const result = spawnSync(process.execPath, [tsc, "--noEmit", "-p", dir, "--pretty", "false"], {
      encoding: "utf8",
      timeout: 120_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    if (result.error) throw new Error(`tsc: ${result.error.message}`);
    if (result.status === 0) return [];
    return parseTscOutput(result.stdout, located);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function parseTscOutput(output: string, located: readonly Located[]): ObjectError[] {
  const errors: ObjectError[] = [];
  for (const line of output.split("\n")) {
    const match = /^.*objects\.ts\((\d+),\d+\): error (TS\d+: .*)$/.exec(line);
    if (match) {
      const at = Number(match[1]);
      const owner = located.find((l) => at >= l.firstLine && at <= l.lastLine);
      errors.push({ rendering: owner?.rendering ?? "(tsc)", object: owner?.object ?? "(imports)", message: match[2]! });
    } else if (line.startsWith(" ") && errors.length > 0) {
      // tsc continues a message's elaboration on indented lines.
      const last = errors.pop()!;
      errors.push({ ...last, message: `${last.message} ${line.trim()}` });
    } else if (line.trim() !== "") {
      errors.push({ rendering: "(tsc)", object: "(tsc)", message: line.trim() });
    }
  }
  return errors;
}

function ajvMessage(error: ErrorObject): string {
  const where = error.instancePath || "/";
  const extra = error.keyword === "additionalProperties" ? ` (${String(error.params.additionalProperty)})` : "";
  return `${where} ${error.message ?? error.keyword}${extra}`;
}

/** Validates every object of every rendering; an empty list means all are valid. */
export function validateRenderings(renderings: readonly Rendering[]): ObjectError[] {
  const ajv = new Ajv({ strict: true, allErrors: true });
  const schemas = new Map(Object.entries(CRD_SCHEMAS).map(([key, schema]) => [key, ajv.compile(schema)]));
  const errors: ObjectError[] = [];
  const typed: TypedObject[] = [];
  for (const rendering of renderings) {
    for (const value of rendering.objects) {
      const object = describeObject(rendering.name, value);
      const at = { rendering: rendering.name, object };
      const validate = schemas.get(`${value.apiVersion}/${value.kind}`);
      const type = typeOf(value);
      if (validate) {
        if (!validate(value)) errors.push(...(validate.errors ?? []).map((e) => ({ ...at, message: ajvMessage(e) })));
      } else if (type) {
        typed.push({ ...at, value, type });
      } else {
        errors.push({
          ...at,
          message: `no type or schema for ${value.apiVersion} ${value.kind}: add one in deploy/src/manifests/renderings.ts or crd-schemas.ts`,
        });
      }
    }
  }
  return [...errors, ...typeCheck(typed)];
}
