// The OpenTelemetry Collector as rendered in every overlay: two replicas spread over nodes under
// a disruption budget; every pipeline (traces, metrics, and logs, which carries the orchestrator's
// step records) starts with memory_limiter and names each sender's pod with k8sattributes before
// batching; k8sattributes gets exactly the API access it needs (read pods and ReplicaSets of its
// own namespace) and a network path to the API server; prod exports logs to a log backend.
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { ConfigMap, ServiceAccount } from "kubernetes-types/core/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.js";
import type { Role, RoleBinding } from "kubernetes-types/rbac/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, renderAll, type Rendering } from "../src/manifests/renderings.js";
import { parseYamlDocuments } from "../src/manifests/yaml.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const NAME = "otel-collector";

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

function one<T>(objects: readonly K8sObject[], kind: string, name = NAME): K8sObject & T {
  const found = objects.filter((o) => o.kind === kind && o.metadata.name.startsWith(name));
  expect(
    found.map((o) => o.metadata.name),
    `${kind} ${name}`,
  ).toHaveLength(1);
  return found[0] as K8sObject & T;
}

interface CollectorConfig {
  processors: Record<string, { filter?: { namespace?: string }; pod_association?: { sources: { from: string }[] }[] }>;
  exporters: Record<string, { endpoint?: string }>;
  service: { pipelines: Record<string, { receivers: string[]; processors: string[]; exporters: string[] }> };
}

function collectorConfig(objects: readonly K8sObject[]): CollectorConfig {
  const map = one<ConfigMap>(objects, "ConfigMap", `${NAME}-config`);
  return parseYamlDocuments(map.data!["config.yaml"]!, map.metadata.name)[0] as CollectorConfig;
}

describe.each([["overlays/dev"], ["overlays/prod"]])("%s: the OpenTelemetry Collector", (overlay) => {
  const objects = () => renderings.find((r) => r.name === overlay)!.objects;

  it("runs two replicas spread over nodes, a disruption budget keeping one through drains", () => {
    const deployment = one<Deployment>(objects(), "Deployment");
    expect(deployment.spec!.replicas).toBe(2);
    const spread = deployment.spec!.template.spec!.topologySpreadConstraints ?? [];
    expect(spread.map((c) => c.topologyKey)).toContain("kubernetes.io/hostname");
    const pdb = one<PodDisruptionBudget>(objects(), "PodDisruptionBudget");
    expect(pdb.spec!.selector!.matchLabels).toEqual(deployment.spec!.selector.matchLabels);
    expect(pdb.spec!.minAvailable).toBe(1);
  });

  it("runs a contrib image, which has k8sattributes", () => {
    const [container] = one<Deployment>(objects(), "Deployment").spec!.template.spec!.containers;
    expect(container!.image).toMatch(/^otel\/opentelemetry-collector-(contrib|k8s):\d+\.\d+\.\d+$/);
  });

  it("has traces, metrics and logs pipelines: memory_limiter first, k8sattributes before batch, every component defined", () => {
    const config = collectorConfig(objects());
    expect(Object.keys(config.service.pipelines).sort()).toEqual(["logs", "metrics", "traces"]);
    for (const [name, pipeline] of Object.entries(config.service.pipelines)) {
      expect(pipeline.receivers, name).toEqual(["otlp"]);
      expect(pipeline.processors, name).toEqual(["memory_limiter", "k8sattributes", "batch"]);
      for (const exporter of pipeline.exporters)
        expect(config.exporters[exporter], `${name}: exporter ${exporter}`).toBeDefined();
      for (const processor of pipeline.processors)
        expect(config.processors[processor], `${name}: processor ${processor}`).toBeDefined();
    }
    // Senders are named by their connection's address, which batching loses.
    expect(config.processors.k8sattributes!.pod_association).toEqual([{ sources: [{ from: "connection" }] }]);
  });

  it("lets k8sattributes read pods and ReplicaSets of its own namespace only, with the one API token in the suite", () => {
    const config = collectorConfig(objects());
    const deployment = one<Deployment>(objects(), "Deployment");
    const pod = deployment.spec!.template.spec!;
    // The filter names the namespace the pod runs in, whatever namespace the overlay renders into.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the Collector's own variable expansion, not a template
    expect(config.processors.k8sattributes!.filter?.namespace).toBe("${env:POD_NAMESPACE}");
    expect(pod.containers[0]!.env?.find((e) => e.name === "POD_NAMESPACE")?.valueFrom?.fieldRef?.fieldPath).toBe(
      "metadata.namespace",
    );
    expect(pod.automountServiceAccountToken).toBe(true);
    const account = one<ServiceAccount>(objects(), "ServiceAccount");
    expect(pod.serviceAccountName).toBe(account.metadata.name);
    const role = one<Role>(objects(), "Role");
    expect(role.metadata.namespace).toBe(deployment.metadata.namespace);
    expect(role.rules).toEqual([
      { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["apps"], resources: ["replicasets"], verbs: ["get", "list", "watch"] },
    ]);
    const binding = one<RoleBinding>(objects(), "RoleBinding");
    expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role.metadata.name });
    expect(binding.subjects).toEqual([
      { kind: "ServiceAccount", name: account.metadata.name, namespace: deployment.metadata.namespace },
    ]);
    expect(objects().filter((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding")).toEqual([]);
  });

  it("may reach the Kubernetes API (443, and 6443 behind the kubernetes Service) and its exporters' ports", () => {
    const policy = one<NetworkPolicy>(objects(), "NetworkPolicy");
    const ports = (policy.spec!.egress ?? []).flatMap((rule) => (rule.ports ?? []).map((p) => p.port));
    expect(ports).toEqual(expect.arrayContaining([443, 6443]));
    for (const exporter of Object.values(collectorConfig(objects()).exporters)) {
      const port = exporter.endpoint ? Number(/:(\d+)(\/|$)/.exec(exporter.endpoint)?.[1]) : undefined;
      if (port !== undefined) expect(ports, exporter.endpoint).toContain(port);
    }
  });
});

describe("overlays/prod: the Collector's exporters", () => {
  it("sends traces to the tracing backend over OTLP and step logs to Loki's OTLP endpoint", () => {
    const config = collectorConfig(renderings.find((r) => r.name === "overlays/prod")!.objects);
    const exporters = (pipeline: string) =>
      config.service.pipelines[pipeline]!.exporters.map((e) => config.exporters[e]!.endpoint);
    expect(exporters("traces")).toEqual(["tempo-distributor.observability.svc.cluster.local:4317"]);
    expect(exporters("logs")).toEqual(["http://loki-distributor.observability.svc.cluster.local:3100/otlp"]);
  });
});
