// The chaos-drills component's drill runner as rendered into the overlays (added to each overlay's
// components, as a person adds it): its Role grants exactly the API calls the runner makes
// (RUNNER_API_CALLS, which drill-cluster-api.test.ts holds the client to) and nothing else — no
// wildcard, no Secret, nothing cluster-wide —, bound to its own ServiceAccount only; the launcher's
// Role is exactly LAUNCHER_API_CALLS, bound to no one by the component, and the only Role that can
// read the namespace's Secrets (through a Job it creates: rbac-check.ts); the runner's pod is the
// only one with an API token, is hardened and runs the overlay's image; and the NetworkPolicies
// let it reach the orchestrator's API and metrics, billing's API, Prometheus and the Kubernetes
// API (DNS from the namespace's shared policy), and let those services admit it.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import type { CronJob } from "kubernetes-types/batch/v1.js";
import type { PodSpec } from "kubernetes-types/core/v1.js";
import type { NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort } from "kubernetes-types/networking/v1.js";
import type { Role, RoleBinding } from "kubernetes-types/rbac/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { type ApiCall, LAUNCHER_API_CALLS, RUNNER_API_CALLS } from "../src/manifests/drill-api-calls.js";
import { DRILL_LAUNCHER, DRILL_RUNNER } from "../src/manifests/drill-runner-objects.js";
import type { K8sObject, Rendering } from "../src/manifests/renderings.js";
import { secretPaths } from "../src/manifests/rbac-check.js";
import { renderOverlayWith } from "./overlay-with.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));
const spec = (name: string) => services.find((s) => s.name === name)!;
let renderings: Rendering[];

beforeAll(() => {
  renderings = ["dev", "prod"].map((overlay) => renderOverlayWith(root, overlay, ["chaos-drills"]));
}, 60_000);

const key = (c: ApiCall) => `${c.group}/${c.resource}:${c.verb}`;

function granted(role: Role): string[] {
  return (role.rules ?? [])
    .flatMap((rule) =>
      (rule.apiGroups ?? []).flatMap((group) =>
        (rule.resources ?? []).flatMap((resource) => rule.verbs.map((verb) => key({ group, resource, verb }))),
      ),
    )
    .sort();
}

function find<T>(objects: readonly K8sObject[], kind: string, name: string): K8sObject & T {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  expect(found, `${kind} ${name}`).toBeDefined();
  return found as K8sObject & T;
}

const runnerPod = (objects: readonly K8sObject[]) =>
  find<CronJob>(objects, "CronJob", DRILL_RUNNER).spec!.jobTemplate.spec!.template;

describe("the drill runner's RBAC", () => {
  it("grants the runner exactly the calls it makes, through its own ServiceAccount, and nothing cluster-wide", () => {
    for (const { name, objects } of renderings) {
      const role = find<Role>(objects, "Role", DRILL_RUNNER);
      expect(granted(role), name).toEqual(RUNNER_API_CALLS.map(key).sort());
      for (const rule of role.rules ?? []) {
        for (const field of [rule.apiGroups, rule.resources, rule.verbs])
          expect(field, `${name}: no wildcard`).not.toContain("*");
        expect(rule.resources, `${name}: no Secret`).not.toContain("secrets");
        // An object named only where the runner's calls name one: its own Lease.
        expect(rule.resourceNames, name).toEqual(
          rule.resources?.includes("leases") && !rule.verbs.includes("create") ? ["loopguard-drill"] : undefined,
        );
      }
      const binding = find<RoleBinding>(objects, "RoleBinding", DRILL_RUNNER);
      expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: DRILL_RUNNER });
      expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: DRILL_RUNNER, namespace: "loopguard" }]);
      expect(runnerPod(objects).spec!.serviceAccountName, name).toBe(DRILL_RUNNER);
      expect(objects.filter((o) => o.kind.startsWith("Cluster")).map((o) => o.kind)).toEqual([]);
    }
  });

  it("holds the power to read the namespace's Secrets in the launcher's Role alone: a Job it creates may mount any", () => {
    for (const { name, objects } of renderings) {
      const roles = objects.filter((o) => o.kind === "Role") as (K8sObject & Role)[];
      const readers = roles.flatMap((r) => (secretPaths(r).length > 0 ? [[r.metadata.name, secretPaths(r)]] : []));
      expect(Object.fromEntries(readers), name).toEqual({ [DRILL_LAUNCHER]: ["jobs create"] });
    }
  });

  it("ships the launcher's Role as exactly what `pnpm drill --k8s` asks kubectl for, bound to no one", () => {
    for (const { name, objects } of renderings) {
      expect(granted(find<Role>(objects, "Role", DRILL_LAUNCHER)), name).toEqual(LAUNCHER_API_CALLS.map(key).sort());
      const bindings = objects.filter((o) => o.kind === "RoleBinding") as (K8sObject & RoleBinding)[];
      expect(bindings.filter((b) => b.roleRef.name === DRILL_LAUNCHER)).toEqual([]);
    }
  });

  it("gives the runner's pod an API token, and no pod but it and the Collector's (k8sattributes, k8s-collector.test.ts)", () => {
    for (const { name, objects } of renderings) {
      const account = find<{ automountServiceAccountToken?: boolean }>(objects, "ServiceAccount", DRILL_RUNNER);
      expect(account.automountServiceAccountToken, name).toBe(false);
      const pods: [string, PodSpec][] = [
        ...objects
          .filter((o) => o.kind === "Deployment")
          .map((d): [string, PodSpec] => [
            d.metadata.name,
            (d as unknown as { spec: { template: { spec: PodSpec } } }).spec.template.spec,
          ]),
        [DRILL_RUNNER, runnerPod(objects).spec!],
      ];
      expect(
        pods.filter(([, pod]) => pod.automountServiceAccountToken !== false).map(([owner]) => owner),
        name,
      ).toEqual(["otel-collector", DRILL_RUNNER]);
    }
  });
});

describe("the drill runner's Job template", () => {
  it("never runs by itself, runs once, hardened, on the overlay's image", () => {
    for (const { name, objects } of renderings) {
      const cronJob = find<CronJob>(objects, "CronJob", DRILL_RUNNER);
      expect(cronJob.spec!.suspend, name).toBe(true);
      expect(cronJob.spec!.jobTemplate.spec!.backoffLimit, name).toBe(0);
      const pod = runnerPod(objects).spec!;
      const [container] = pod.containers;
      expect(container!.image, name).toBe(
        name.startsWith("overlays/prod")
          ? "registry.example.com/loopguard/drill-runner:unset"
          : "loopguard/drill-runner:latest",
      );
      expect({ ...pod.securityContext, ...container!.securityContext }).toMatchObject({
        runAsNonRoot: true,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ["ALL"] },
        seccompProfile: { type: "RuntimeDefault" },
      });
      expect(container!.resources?.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
      // The people's keys and the JWKS come as files; no variable holds a secret.
      expect(container!.env?.filter((e) => e.valueFrom?.secretKeyRef)).toEqual([]);
    }
  });
});

type Labels = Readonly<Record<string, string>>;
interface Pod {
  readonly namespace: string;
  readonly labels: Labels;
}

const matches = (selector: { matchLabels?: Labels } | undefined, labels: Labels) =>
  Object.entries(selector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v);

function peerMatches(peer: NetworkPolicyPeer, pod: Pod | undefined, policyNamespace: string): boolean {
  if (peer.ipBlock) return pod === undefined;
  if (!pod) return false;
  const namespaceOk = peer.namespaceSelector
    ? matches(peer.namespaceSelector, { "kubernetes.io/metadata.name": pod.namespace })
    : pod.namespace === policyNamespace;
  return namespaceOk && (peer.podSelector ? matches(peer.podSelector, pod.labels) : true);
}

const portMatches = (ports: NetworkPolicyPort[] | undefined, port: number, protocol: string) =>
  ports === undefined ||
  ports.some((p) => (p.protocol ?? "TCP") === protocol && (p.port === undefined || p.port === port));

/** Whether the policies selecting `pod` let it send to `peer` (a pod, or undefined: an address outside the pod network) on port/protocol. */
function egressAllowed(
  policies: readonly NetworkPolicy[],
  pod: Pod,
  peer: Pod | undefined,
  port: number,
  protocol = "TCP",
): boolean {
  const selecting = policies.filter(
    (p) =>
      p.metadata!.namespace === pod.namespace &&
      matches(p.spec!.podSelector, pod.labels) &&
      p.spec!.policyTypes?.includes("Egress"),
  );
  return selecting.some((p) =>
    (p.spec!.egress ?? []).some(
      (rule) =>
        (rule.to === undefined || rule.to.some((to) => peerMatches(to, peer, pod.namespace))) &&
        portMatches(rule.ports, port, protocol),
    ),
  );
}

function ingressAllowed(policies: readonly NetworkPolicy[], pod: Pod, from: Pod, port: number): boolean {
  const selecting = policies.filter(
    (p) =>
      p.metadata!.namespace === pod.namespace &&
      matches(p.spec!.podSelector, pod.labels) &&
      p.spec!.policyTypes?.includes("Ingress"),
  );
  return selecting.some((p) =>
    (p.spec!.ingress ?? []).some(
      (rule) =>
        (rule.from === undefined || rule.from.some((f) => peerMatches(f, from, pod.namespace))) &&
        portMatches(rule.ports, port, "TCP"),
    ),
  );
}

describe("the drill runner's network", () => {
  it("reaches what it calls, and is admitted there", () => {
    for (const { name, objects } of renderings) {
      const policies = objects.filter((o) => o.kind === "NetworkPolicy") as unknown as NetworkPolicy[];
      const runner: Pod = { namespace: "loopguard", labels: runnerPod(objects).metadata!.labels! };
      const podOf = (service: string): Pod => ({
        namespace: "loopguard",
        labels: (
          objects.find(
            (o) => o.kind === "Deployment" && o.metadata.labels?.["app.kubernetes.io/name"] === service,
          ) as unknown as { spec: { template: { metadata: { labels: Labels } } } }
        ).spec.template.metadata.labels,
      });
      const orchestrator = podOf("orchestrator");
      const billing = podOf("billing");
      const prometheus: Pod = { namespace: "monitoring", labels: { "app.kubernetes.io/name": "prometheus" } };
      for (const [what, peer, port] of [
        ["orchestrator gRPC", orchestrator, spec("orchestrator").port],
        ["orchestrator metrics", orchestrator, spec("orchestrator").metricsPort],
        ["billing gRPC", billing, spec("billing").port],
        ["Prometheus", prometheus, 9090],
        ["Kubernetes API", undefined, 443],
        ["Kubernetes API endpoint", undefined, 6443],
      ] as const) {
        expect(egressAllowed(policies, runner, peer, port), `${name}: runner → ${what}`).toBe(true);
      }
      expect(
        egressAllowed(policies, runner, { namespace: "kube-system", labels: { "k8s-app": "kube-dns" } }, 53, "UDP"),
        `${name}: DNS`,
      ).toBe(true);
      expect(
        ingressAllowed(policies, orchestrator, runner, spec("orchestrator").port),
        `${name}: orchestrator admits the runner's calls`,
      ).toBe(true);
      expect(
        ingressAllowed(policies, orchestrator, runner, spec("orchestrator").metricsPort),
        `${name}: orchestrator admits the runner's scrapes`,
      ).toBe(true);
      expect(
        ingressAllowed(policies, billing, runner, spec("billing").port),
        `${name}: billing admits the ledger audit`,
      ).toBe(true);
      // And nothing else: the runner neither calls the other tools nor is called.
      for (const other of ["kb-search", "risk"])
        expect(egressAllowed(policies, runner, podOf(other), spec(other).port), `${name}: runner → ${other}`).toBe(
          false,
        );
      expect(
        ingressAllowed(policies, runner, orchestrator, spec("orchestrator").port),
        `${name}: nothing calls the runner`,
      ).toBe(false);
    }
  });
});
