// What a platform team checks before applying the manifests, on the rendered output: every tool
// has what it needs to run replicated and observed in prod (its workload — a Deployment or an
// Argo Rollout —, headless Service, autoscaler, disruption budget, network policy, gRPC probes,
// ServiceMonitor and alert rules), every container is hardened, secrets go only where they are
// used, and SQLite never runs where a service can have more than one replica.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { contractFiles } from "@loopguard/proto";
import { discoverServices, type ServiceSpec } from "@loopguard/supervisor/services";
import { methodPolicy, servicePolicy } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { Container, PodSpec, PodTemplateSpec, Service } from "kubernetes-types/core/v1.js";
import type { LabelSelector } from "kubernetes-types/meta/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, renderAll, type Rendering } from "../src/k8s-check.js";
import { NAMESPACE } from "../src/k8s-objects.js";
import { deployedServices } from "../src/prometheus-files.js";
import { pascalCase } from "../src/slo-rules.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));
const tools = services.filter((s) => s.kind === "tool");
const WORKLOAD_KINDS = new Set(["apps/v1/Deployment", "argoproj.io/v1alpha1/Rollout"]);

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

const prodRenderings = () => renderings.filter((r) => r.name.startsWith("overlays/prod"));

function ofKind<T>(objects: readonly K8sObject[], apiVersion: string, kind: string): (K8sObject & T)[] {
  return objects.filter((o) => o.apiVersion === apiVersion && o.kind === kind) as (K8sObject & T)[];
}

/** A workload: an object with a pod template, its name and kind. */
type Workload = K8sObject & { spec: { template: PodTemplateSpec } };

function workloads(objects: readonly K8sObject[]): Workload[] {
  return objects.filter((o) => WORKLOAD_KINDS.has(`${o.apiVersion}/${o.kind}`)) as Workload[];
}

function workloadOf(objects: readonly K8sObject[], name: string): Workload {
  const found = workloads(objects).filter((w) => w.metadata.name === name);
  expect(found, `${name}: exactly one Deployment or Rollout`).toHaveLength(1);
  return found[0]!;
}

function selects(selector: LabelSelector | Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  const matchLabels = selector && "matchLabels" in selector ? (selector.matchLabels as Record<string, string>) : (selector as Record<string, string> | undefined);
  if (!matchLabels || Object.keys(matchLabels).length === 0) return false;
  return Object.entries(matchLabels).every(([key, value]) => labels?.[key] === value);
}

function podSpec(workload: Workload): PodSpec {
  return workload.spec.template.spec!;
}

function mainContainer(workload: Workload): Container {
  return podSpec(workload).containers.find((c) => c.name === workload.metadata.name)!;
}

function envValue(container: Container, name: string): string | undefined {
  return container.env?.find((e) => e.name === name)?.value;
}

describe.each(tools.map((t) => [t.name, t] as const))("prod: tool %s", (_name, tool: ServiceSpec) => {
  it("has a Deployment or Rollout with ≥ 2 replicas under an autoscaling/v2 HPA, spread over nodes and zones", () => {
    for (const { name, objects } of prodRenderings()) {
      const workload = workloadOf(objects, tool.name);
      const hpa = ofKind<HorizontalPodAutoscaler>(objects, "autoscaling/v2", "HorizontalPodAutoscaler").filter(
        (h) => h.spec!.scaleTargetRef.name === tool.name && h.spec!.scaleTargetRef.kind === workload.kind,
      );
      expect(hpa, `${name}: HPA of ${tool.name}`).toHaveLength(1);
      expect(hpa[0]!.spec!.minReplicas, name).toBeGreaterThanOrEqual(2);
      expect(hpa[0]!.spec!.maxReplicas, name).toBeGreaterThan(hpa[0]!.spec!.minReplicas!);
      const pod = podSpec(workload);
      expect(pod.topologySpreadConstraints?.map((c) => c.topologyKey), name).toEqual(expect.arrayContaining(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]));
      expect(pod.affinity?.podAntiAffinity, name).toBeDefined();
    }
  });

  it("has a headless Service with its gRPC port, and a PodDisruptionBudget over its pods", () => {
    for (const { name, objects } of prodRenderings()) {
      const labels = workloadOf(objects, tool.name).spec.template.metadata!.labels;
      const headless = ofKind<Service>(objects, "v1", "Service").filter((s) => s.spec!.clusterIP === "None" && selects(s.spec!.selector, labels));
      expect(headless.map((s) => s.spec!.ports!.map((p) => p.port)).flat(), name).toContain(tool.port);
      const pdb = ofKind<PodDisruptionBudget>(objects, "policy/v1", "PodDisruptionBudget").filter((p) => selects(p.spec!.selector, labels));
      expect(pdb, name).toHaveLength(1);
      expect(pdb[0]!.spec!.maxUnavailable ?? pdb[0]!.spec!.minAvailable, name).toBeDefined();
    }
  });

  it("has a NetworkPolicy that admits the orchestrator on its gRPC port only", () => {
    for (const { name, objects } of prodRenderings()) {
      const labels = workloadOf(objects, tool.name).spec.template.metadata!.labels;
      const orchestratorLabels = workloadOf(objects, "orchestrator").spec.template.metadata!.labels;
      const policies = ofKind<NetworkPolicy>(objects, "networking.k8s.io/v1", "NetworkPolicy").filter((p) => selects(p.spec!.podSelector, labels));
      const grpcRules = policies.flatMap((p) => p.spec!.ingress ?? []).filter((rule) => rule.ports?.some((port) => port.port === tool.port));
      expect(grpcRules.length, name).toBeGreaterThan(0);
      for (const rule of grpcRules) {
        expect(rule.from?.length, name).toBeGreaterThan(0);
        for (const peer of rule.from!) expect(selects(peer.podSelector, orchestratorLabels) && !peer.namespaceSelector, `${name}: ${JSON.stringify(peer)}`).toBe(true);
      }
    }
  });

  it("has native gRPC startup, readiness and liveness probes on its gRPC port, and a drain that fits the grace period", () => {
    for (const { name, objects } of prodRenderings()) {
      const workload = workloadOf(objects, tool.name);
      const container = mainContainer(workload);
      for (const probe of [container.startupProbe, container.readinessProbe, container.livenessProbe]) expect(probe?.grpc?.port, name).toBe(tool.port);
      const drainMs = Number(envValue(container, `${tool.envPrefix}_SHUTDOWN_GRACE_MS`));
      const preStop = container.lifecycle?.preStop?.sleep?.seconds ?? 0;
      expect(drainMs, name).toBeGreaterThan(0);
      expect(preStop, name).toBeGreaterThan(0);
      expect(podSpec(workload).terminationGracePeriodSeconds, name).toBeGreaterThanOrEqual(preStop + (2 * drainMs) / 1000);
    }
  });

  it("has a ServiceMonitor on its Service's HTTP port, and alert rules from its contract", () => {
    for (const { name, objects } of prodRenderings()) {
      const services = ofKind<Service>(objects, "v1", "Service").filter((s) => s.metadata.name === tool.name);
      const monitors = ofKind<{ spec: { selector: LabelSelector; endpoints: { port?: string }[] } }>(objects, "monitoring.coreos.com/v1", "ServiceMonitor").filter((m) =>
        services.some((s) => selects(m.spec.selector, s.metadata.labels)),
      );
      expect(monitors, name).toHaveLength(1);
      const metricsPort = services[0]!.spec!.ports!.find((p) => p.name === monitors[0]!.spec.endpoints[0]!.port);
      expect(metricsPort?.port, name).toBe(tool.metricsPort);

      const alerts = ofKind<{ spec: { groups: { name: string; rules: { alert?: string }[] }[] } }>(objects, "monitoring.coreos.com/v1", "PrometheusRule")
        .flatMap((r) => r.spec.groups)
        .filter((g) => g.name === `loopguard-slo-${tool.name}`)
        .flatMap((g) => g.rules.map((r) => r.alert))
        .filter(Boolean);
      const contract = deployedServices(contractFiles, [tool]);
      expect(contract.map((s) => servicePolicy(s).toolName)).toEqual([tool.name]);
      const expected = [
        `${pascalCase(tool.name)}Down`,
        ...contract[0]!.methods
          .filter((m) => m.methodKind === "unary" && methodPolicy(m).sla)
          .flatMap((m) => [`${pascalCase(tool.name)}${m.name}LatencyAboveSlo`, `${pascalCase(tool.name)}${m.name}ErrorBudgetBurn`]),
      ];
      expect(alerts, name).toEqual(expect.arrayContaining(expected));
    }
  });
});

describe("prod", () => {
  it("runs every stateful service on PostgreSQL, its DSN from a Secret", () => {
    for (const { name, objects } of prodRenderings()) {
      for (const spec of services.filter((s) => s.stateful)) {
        const store = mainContainer(workloadOf(objects, spec.name)).env?.find((e) => e.name === `${spec.envPrefix}_STORE`);
        expect(store?.valueFrom?.secretKeyRef?.name, `${name}: ${spec.name}`).toBe(`loopguard-${spec.name}-store`);
      }
    }
  });

  it("pins every image to a tag other than latest", () => {
    for (const { name, objects } of prodRenderings()) {
      for (const container of workloads(objects).flatMap((w) => podSpec(w).containers)) {
        expect(container.image, `${name}: ${container.name}`).not.toMatch(/:latest$/);
      }
    }
  });
});

describe("every rendering", () => {
  it("runs every container non-root, with a read-only root filesystem, no privilege escalation, no capabilities, seccomp and resource limits", () => {
    for (const { name, objects } of renderings) {
      for (const workload of workloads(objects)) {
        const pod = podSpec(workload);
        for (const container of [...(pod.initContainers ?? []), ...pod.containers]) {
          const where = `${name}: ${workload.metadata.name}/${container.name}`;
          const effective = { ...pod.securityContext, ...container.securityContext };
          expect(effective.runAsNonRoot, where).toBe(true);
          expect(effective.runAsUser, where).toBeGreaterThan(0);
          expect(container.securityContext?.readOnlyRootFilesystem, where).toBe(true);
          expect(container.securityContext?.allowPrivilegeEscalation, where).toBe(false);
          expect(container.securityContext?.capabilities?.drop, where).toEqual(["ALL"]);
          expect(effective.seccompProfile?.type, where).toBe("RuntimeDefault");
          for (const resource of ["cpu", "memory"]) {
            expect(container.resources?.requests?.[resource], `${where} requests ${resource}`).toBeDefined();
            expect(container.resources?.limits?.[resource], `${where} limits ${resource}`).toBeDefined();
          }
        }
      }
    }
  });

  it("names a tag for every image (an overlay's `images:` list names every service)", () => {
    for (const { name, objects } of renderings) {
      for (const container of workloads(objects).flatMap((w) => podSpec(w).containers)) {
        expect(container.image, `${name}: ${container.name} has no tag in the overlay's images:`).toMatch(/:\w[\w.-]*$/);
      }
    }
  });

  it("gives every workload its own ServiceAccount and no API token", () => {
    for (const { name, objects } of renderings) {
      const accounts = new Map(objects.filter((o) => o.kind === "ServiceAccount").map((o) => [o.metadata.name, o]));
      for (const workload of workloads(objects)) {
        const pod = podSpec(workload);
        expect(pod.automountServiceAccountToken, `${name}: ${workload.metadata.name}`).toBe(false);
        expect(accounts.get(pod.serviceAccountName!)?.automountServiceAccountToken, `${name}: ${workload.metadata.name}`).toBe(false);
      }
    }
  });

  it("mounts the token signing key into the orchestrator only, and every service's secret files where it reads them", () => {
    for (const { name, objects } of renderings) {
      const signing = workloads(objects).filter((w) => podSpec(w).volumes?.some((v) => v.secret?.secretName === "loopguard-signing-key"));
      expect(signing.map((w) => w.metadata.name), name).toEqual(["orchestrator"]);
      for (const spec of services) {
        const container = mainContainer(workloadOf(objects, spec.name));
        expect(envValue(container, "LOOPGUARD_JWKS_FILE"), `${name}: ${spec.name}`).toBe("/etc/loopguard/jwks/jwks.json");
        const signingKey = envValue(container, "LOOPGUARD_SIGNING_KEY_FILE");
        expect(signingKey !== undefined, `${name}: ${spec.name} LOOPGUARD_SIGNING_KEY_FILE`).toBe(spec.kind === "orchestrator");
        for (const variable of Object.keys(spec.secretFiles)) {
          const path = envValue(container, variable)!;
          expect(container.volumeMounts?.some((m) => path.startsWith(`${m.mountPath}/`) && m.readOnly), `${name}: ${spec.name} ${variable}`).toBe(true);
        }
      }
    }
  });

  it("runs SQLite only where the service cannot get a second replica", () => {
    for (const { name, objects } of renderings) {
      const autoscaled = new Set(ofKind<HorizontalPodAutoscaler>(objects, "autoscaling/v2", "HorizontalPodAutoscaler").map((h) => h.spec!.scaleTargetRef.name));
      for (const spec of services.filter((s) => s.stateful)) {
        const workload = workloadOf(objects, spec.name) as Workload & Deployment;
        const store = mainContainer(workload).env?.find((e) => e.name === `${spec.envPrefix}_STORE`);
        const sqlite = store?.valueFrom === undefined;
        if (!sqlite) continue;
        const where = `${name}: ${spec.name} on ${store?.value ?? "the default SQLite store"}`;
        expect(autoscaled.has(spec.name), where).toBe(false);
        expect(workload.spec?.replicas ?? 1, where).toBe(1);
        expect(workload.spec?.strategy?.type, where).toBe("Recreate");
      }
    }
  });

  it("puts everything in namespace loopguard, behind a default-deny NetworkPolicy", () => {
    for (const { name, objects } of renderings) {
      for (const object of objects.filter((o) => o.kind !== "Namespace")) expect(object.metadata.namespace, `${name}: ${object.kind} ${object.metadata.name}`).toBe(NAMESPACE);
      const denyAll = ofKind<NetworkPolicy>(objects, "networking.k8s.io/v1", "NetworkPolicy").filter(
        (p) => Object.keys(p.spec!.podSelector).length === 0 && p.spec!.policyTypes?.length === 2 && !p.spec!.ingress && !p.spec!.egress,
      );
      expect(denyAll, name).toHaveLength(1);
    }
  });
});
