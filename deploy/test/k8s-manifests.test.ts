// The Kubernetes manifests, checked offline as CI can: the generated parts are current, every
// overlay (and each optional component on prod) renders with `kubectl kustomize`, every rendered
// object passes the strict validation, and the validation itself refuses broken objects.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { renderGeneratedFiles } from "../src/manifests/generated-files.js";
import { type K8sObject, renderAll, type Rendering, validateRenderings } from "../src/manifests/renderings.js";
import { committedRuleFiles } from "../src/manifests/prometheus-files.js";
import { parseYamlDocuments } from "../src/manifests/yaml.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

function rendering(name: string): Rendering {
  const found = renderings.find((r) => r.name === name);
  if (!found) throw new Error(`no rendering ${name}; have ${renderings.map((r) => r.name).join(", ")}`);
  return found;
}

function find(objects: readonly K8sObject[], kind: string, name: string): K8sObject {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  if (!found) throw new Error(`no ${kind} ${name}`);
  return found;
}

describe("generated manifests", () => {
  it("are up to date with the services' manifests and the contracts, with nothing left over (run `pnpm gen` if not)", () => {
    const { files, ownedDirs } = renderGeneratedFiles(root, contractFiles);
    for (const [path, content] of files) {
      expect(existsSync(join(root, path)), `${path} is missing`).toBe(true);
      expect(readFileSync(join(root, path), "utf8"), path).toBe(content);
    }
    const onDisk = ownedDirs.flatMap((dir) => readdirSync(join(root, dir)).map((name) => join(dir, name)));
    expect(onDisk.filter((path) => !files.has(path))).toEqual([]);
  });

  it("give the PrometheusRule exactly the rule groups of deploy/prometheus/rules/, in the order the local config loads them", () => {
    const groups = committedRuleFiles(root).flatMap(
      (path) => (parseYamlDocuments(readFileSync(join(root, path), "utf8"), path) as [{ groups: unknown[] }])[0].groups,
    );
    const rule = find(rendering("overlays/prod").objects, "PrometheusRule", "loopguard-slo") as K8sObject & {
      spec: { groups: unknown[] };
    };
    expect(rule.spec.groups).toEqual(groups);
    expect(rule.spec.groups.length).toBeGreaterThanOrEqual(4);
  });
});

describe("the chaos-drills component", () => {
  it("holds a paused pod-kill of one pod of every service and of all pods of every tool: applying it kills nothing", () => {
    const chaos = rendering("overlays/prod + components/chaos-drills").objects.filter(
      (o) => o.kind === "PodChaos",
    ) as (K8sObject & {
      metadata: { annotations?: Record<string, string> };
      spec: { action: string; mode: string; gracePeriod: number; selector: { labelSelectors: Record<string, string> } };
    })[];
    const kills = chaos.map((o) => `${o.spec.selector.labelSelectors["app.kubernetes.io/name"]} ${o.spec.mode}`).sort();
    expect(kills).toEqual([
      "billing all",
      "billing one",
      "kb-search all",
      "kb-search one",
      "orchestrator one",
      "risk all",
      "risk one",
    ]);
    for (const o of chaos) {
      expect(o.metadata.annotations?.["experiment.chaos-mesh.org/pause"]).toBe("true");
      expect(o.spec).toMatchObject({ action: "pod-kill", gracePeriod: 0 });
    }
    expect(
      find(rendering("overlays/prod + components/chaos-drills").objects, "Role", "loopguard-drill-runner"),
    ).toBeDefined();
  });
});

describe("the oidc-egress component", () => {
  const withOidc = () => renderings.filter((r) => r.name.includes("components/oidc-egress"));
  const orchestratorEnv = (objects: readonly K8sObject[]) =>
    (objects.filter((o) => o.kind === "Deployment" && o.metadata.name === "orchestrator") as (K8sObject & Deployment)[])
      .flatMap((d) => d.spec!.template.spec!.containers.filter((c) => c.name === "orchestrator"))
      .map((c) => (c.env ?? []).filter((e) => e.name.startsWith("ORCHESTRATOR_OIDC_")));

  it("gives the orchestrator its issuer, audience and roles claim from the ConfigMap loopguard-oidc in every rendering with it", () => {
    expect(withOidc().map((r) => r.name)).toContain("overlays/prod + components/oidc-egress");
    for (const { name, objects } of withOidc()) {
      expect(orchestratorEnv(objects), name).toEqual([
        [
          {
            name: "ORCHESTRATOR_OIDC_ISSUER",
            valueFrom: { configMapKeyRef: { name: "loopguard-oidc", key: "issuer" } },
          },
          {
            name: "ORCHESTRATOR_OIDC_AUDIENCE",
            valueFrom: { configMapKeyRef: { name: "loopguard-oidc", key: "audience" } },
          },
          // Optional: without the key the variable is unset and the orchestrator reads loopguard_roles.
          {
            name: "ORCHESTRATOR_OIDC_ROLES_CLAIM",
            valueFrom: { configMapKeyRef: { name: "loopguard-oidc", key: "roles-claim", optional: true } },
          },
        ],
      ]);
    }
    expect(orchestratorEnv(rendering("overlays/prod").objects)).toEqual([[]]);
  });

  it("lets the orchestrator's pods, and only them, out on 443/TCP", () => {
    expect(withOidc().length).toBeGreaterThan(0);
    for (const { name, objects } of withOidc()) {
      const policy = find(objects, "NetworkPolicy", "orchestrator-oidc-egress") as K8sObject & NetworkPolicy;
      expect(policy.spec, name).toEqual({
        podSelector: { matchLabels: { "app.kubernetes.io/name": "orchestrator" } },
        policyTypes: ["Egress"],
        egress: [{ ports: [{ protocol: "TCP", port: 443 }] }],
      });
    }
  });
});

describe("kubectl kustomize + strict validation", () => {
  it("renders every overlay and every optional component on prod", () => {
    const names = renderings.map((r) => r.name);
    expect(names).toEqual(
      expect.arrayContaining([
        "overlays/dev",
        "overlays/prod",
        "overlays/prod + components/chaos-drills",
        "overlays/prod + components/cloudnative-pg",
        "overlays/prod + components/dns-kube-dns-only",
        "overlays/prod + components/llm-egress",
        "overlays/prod + components/oidc-egress",
        "overlays/prod + components/patrol",
        "overlays/prod + components/argo-rollouts",
        "overlays/prod + components/plain-blue-green",
        "overlays/prod + components/argo-rollouts + components/chaos-drills + components/cloudnative-pg + components/dns-kube-dns-only + components/llm-egress + components/oidc-egress + components/patrol",
        "overlays/prod + components/plain-blue-green + components/chaos-drills + components/cloudnative-pg + components/dns-kube-dns-only + components/llm-egress + components/oidc-egress + components/patrol",
      ]),
    );
    for (const r of renderings) expect(r.objects.length, r.name).toBeGreaterThan(20);
  });

  it("finds no error in any rendered object", () => {
    expect(validateRenderings(renderings)).toEqual([]);
  }, 60_000);
});

describe("the validator", () => {
  let errors: ReturnType<typeof validateRenderings>;
  const messages = (name: string) => errors.filter((e) => e.object.endsWith(`/${name}`)).map((e) => e.message);

  beforeAll(() => {
    const prod = rendering("overlays/prod").objects;
    const deployment = find(prod, "Deployment", "kb-search");
    const named = (object: K8sObject, name: string, change: (copy: Record<string, any>) => void): K8sObject => {
      const copy = structuredClone(object) as Record<string, any>;
      copy.metadata.name = name;
      change(copy);
      return copy as K8sObject;
    };
    const cluster = find(
      rendering("overlays/prod + components/cloudnative-pg").objects,
      "Cluster",
      "loopguard-postgres",
    );
    const argo = rendering("overlays/prod + components/argo-rollouts").objects;
    const broken: K8sObject[] = [
      named(deployment, "as-rendered", () => undefined),
      named(deployment, "misspelled-field", (d) => (d.spec.template.spec.containers[0].imagePullPolicyy = "Always")),
      named(deployment, "wrong-type", (d) => (d.spec.template.spec.containers[0].ports[0].containerPort = "50061")),
      named(deployment, "missing-required", (d) => delete d.spec.template.spec.containers[0].name),
      named(
        find(prod, "ServiceMonitor", "kb-search"),
        "monitor-misspelled",
        (m) => (m.spec.endpoint = m.spec.endpoints),
      ),
      named(
        find(prod, "HorizontalPodAutoscaler", "kb-search"),
        "hpa-missing-target",
        (h) => delete h.spec.scaleTargetRef,
      ),
      named(cluster, "cluster-misspelled", (c) => (c.spec.instancess = 3)),
      named(cluster, "cluster-wrong-type", (c) => (c.spec.instances = "3")),
      named(cluster, "cluster-missing-storage", (c) => delete c.spec.storage),
      named(
        find(argo, "Rollout", "billing"),
        "rollout-misspelled",
        (r) => (r.spec.strategy.blueGreen.activeServce = "billing"),
      ),
      named(
        find(argo, "AnalysisTemplate", "billing-slo"),
        "analysis-wrong-type",
        (t) => (t.spec.metrics[0].failureLimit = true),
      ),
      { apiVersion: "example.com/v1", kind: "Widget", metadata: { name: "unknown-kind", namespace: "loopguard" } },
    ];
    errors = validateRenderings([{ name: "broken", objects: broken }]);
  }, 60_000);

  it("accepts the object as rendered", () => {
    expect(messages("as-rendered")).toEqual([]);
  });

  it("refuses a misspelled field, naming it", () => {
    expect(messages("misspelled-field").join("\n")).toMatch(/"imagePullPolicyy"' does not exist in type 'Container'/);
    expect(messages("monitor-misspelled").join("\n")).toMatch(/"endpoint"' does not exist/);
    expect(messages("rollout-misspelled").join("\n")).toMatch(/"activeServce"' does not exist/);
    expect(messages("cluster-misspelled")).toEqual(["/spec must NOT have additional properties (instancess)"]);
  });

  it("refuses a wrong type", () => {
    expect(messages("wrong-type").join("\n")).toMatch(/Type 'string' is not assignable to type 'number'/);
    expect(messages("cluster-wrong-type")).toEqual(["/spec/instances must be integer"]);
    expect(messages("analysis-wrong-type").join("\n")).toMatch(
      /Type 'true' is not assignable to type 'string \| number/,
    );
  });

  it("refuses a missing required field", () => {
    expect(messages("missing-required").join("\n")).toMatch(/Property 'name' is missing/);
    expect(messages("hpa-missing-target").join("\n")).toMatch(/Property 'scaleTargetRef' is missing/);
    expect(messages("cluster-missing-storage")).toEqual(["/spec must have required property 'storage'"]);
  });

  it("refuses a kind it has no type or schema for", () => {
    expect(messages("unknown-kind").join("\n")).toMatch(/no type or schema for example\.com\/v1 Widget/);
  });

  it("says which object each error belongs to, and nothing else", () => {
    const objects = new Set(errors.map((e) => e.object.replace(/^broken \w+ loopguard\//, "")));
    expect([...objects].sort()).toEqual(
      [
        "misspelled-field",
        "wrong-type",
        "missing-required",
        "monitor-misspelled",
        "hpa-missing-target",
        "cluster-misspelled",
        "cluster-wrong-type",
        "cluster-missing-storage",
        "rollout-misspelled",
        "analysis-wrong-type",
        "unknown-kind",
      ].sort(),
    );
  });
});
