// The generated parts of deploy/k8s, rendered in memory: the services' base objects and the
// per-service components the overlays pick (monitoring, high availability, SQLite volumes,
// PostgreSQL stores). `pnpm gen` writes them; tests and CI check the committed copies are current.
import { join } from "node:path";
import type { ServiceSpec } from "@loopguard/supervisor/services";
import {
  horizontalPodAutoscaler,
  podDisruptionBudget,
  postgresEgress,
  postgresStore,
  prometheusRule,
  serviceMonitor,
  serviceObjects,
  sqliteVolume,
} from "./k8s-objects.js";
import { drillRunnerRole, shippedPodKills } from "./drills/pod-chaos.js";
import { GENERATED_HEADER } from "./prometheus-files.js";
import type { RuleFile } from "./slo-rules.js";
import { toYaml, toYamlDocuments } from "./yaml.js";

export const K8S_DIR = join("deploy", "k8s");
export const BASE_SERVICES_DIR = join(K8S_DIR, "base", "services");
export const COMPONENTS_DIR = join(K8S_DIR, "components");
export const OVERLAYS_DIR = join(K8S_DIR, "overlays");

/** Components whose content is generated, by folder name. */
export const GENERATED_COMPONENTS = ["monitoring", "high-availability", "sqlite-volumes", "postgres-stores", "chaos-drills"] as const;

function kustomization(resources: readonly string[], patches: readonly string[] = []): object {
  return {
    apiVersion: "kustomize.config.k8s.io/v1beta1",
    kind: "Kustomization",
    resources,
    ...(patches.length > 0 ? { patches: patches.map((path) => ({ path })) } : {}),
  };
}

function component(resources: readonly string[], patches: readonly string[] = []): object {
  return {
    apiVersion: "kustomize.config.k8s.io/v1alpha1",
    kind: "Component",
    ...(resources.length > 0 ? { resources } : {}),
    ...(patches.length > 0 ? { patches: patches.map((path) => ({ path })) } : {}),
  };
}

/** Path relative to the repository root → file content. */
export function renderK8sFiles(services: readonly ServiceSpec[], rules: RuleFile): Map<string, string> {
  const files = new Map<string, string>();
  const put = (dir: string, name: string, content: object | object[]) =>
    files.set(join(dir, name), Array.isArray(content) ? toYamlDocuments(content, GENERATED_HEADER) : toYaml(content, GENERATED_HEADER));
  const stateful = services.filter((s) => s.stateful);
  const perService = (name: string) => services.map((s) => `${s.name}.${name}.yaml`);

  for (const spec of services) put(BASE_SERVICES_DIR, `${spec.name}.yaml`, serviceObjects(spec, services));
  put(BASE_SERVICES_DIR, "kustomization.yaml", kustomization(services.map((s) => `${s.name}.yaml`)));

  const monitoring = join(COMPONENTS_DIR, "monitoring");
  for (const spec of services) put(monitoring, `${spec.name}.service-monitor.yaml`, serviceMonitor(spec));
  put(monitoring, "prometheus-rule.yaml", prometheusRule(rules));
  put(monitoring, "kustomization.yaml", component([...perService("service-monitor"), "prometheus-rule.yaml"]));

  const highAvailability = join(COMPONENTS_DIR, "high-availability");
  for (const spec of services) put(highAvailability, `${spec.name}.yaml`, [horizontalPodAutoscaler(spec), podDisruptionBudget(spec)]);
  put(highAvailability, "kustomization.yaml", component(services.map((s) => `${s.name}.yaml`)));

  const sqlite = join(COMPONENTS_DIR, "sqlite-volumes");
  for (const spec of stateful) {
    const { claim, patch } = sqliteVolume(spec);
    put(sqlite, `${spec.name}.claim.yaml`, claim);
    put(sqlite, `${spec.name}.patch.yaml`, patch);
  }
  put(
    sqlite,
    "kustomization.yaml",
    component(
      stateful.map((s) => `${s.name}.claim.yaml`),
      stateful.map((s) => `${s.name}.patch.yaml`),
    ),
  );

  const postgres = join(COMPONENTS_DIR, "postgres-stores");
  for (const spec of stateful) put(postgres, `${spec.name}.patch.yaml`, postgresStore(spec));
  put(postgres, "network-policy.yaml", postgresEgress());
  put(
    postgres,
    "kustomization.yaml",
    component(
      ["network-policy.yaml"],
      stateful.map((s) => `${s.name}.patch.yaml`),
    ),
  );

  const chaos = join(COMPONENTS_DIR, "chaos-drills");
  for (const spec of services) put(chaos, `${spec.name}.pod-kill.yaml`, shippedPodKills(spec));
  put(chaos, "drill-runner.role.yaml", drillRunnerRole());
  put(chaos, "kustomization.yaml", component([...perService("pod-kill"), "drill-runner.role.yaml"]));
  return files;
}
