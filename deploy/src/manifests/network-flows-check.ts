// The flows of network-flows.ts checked against the NetworkPolicies of each rendering (with
// network-policy.ts): every flow that applies there must pass the source's egress and the
// destination's ingress, every flow that must be stopped is stopped at one end at least, and every
// connection to the internet a pod of the suite is let through is a listed one (required, or wide:
// network-flows-wide.ts). Run by `pnpm check:k8s` and by deploy/test/network-flows.test.ts.
import { basename, join } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { NAMESPACE } from "./cluster-names.js";
import { componentsOf, type K8sObject, type Rendering } from "./renderings.js";
import { OVERLAYS_DIR, RELEASE_COMPONENTS } from "./generated-components.js";
import { type EndpointRef, type Flow, INTERNET } from "./network-endpoints.js";
import { deniedFlows, requiredFlows } from "./network-flows.js";
import { wideFlows } from "./network-flows-wide.js";
import { connection, type Endpoint, namespaceLabels, type PodEndpoint, type Protocol } from "./network-policy.js";

/** The components in a rendering: its overlay's and those added on top ("overlays/prod + components/x + …"), and "release-path". */
export function featuresOf(repoRoot: string, rendering: Rendering): Set<string> {
  const [overlay, ...added] = rendering.name.split(" + ");
  const own = componentsOf(join(repoRoot, OVERLAYS_DIR, overlay!.replace(/^overlays\//, ""), "kustomization.yaml")).map(
    (path) => basename(path),
  );
  const features = new Set([...own, ...added.map((c) => c.replace(/^components\//, ""))]);
  if (RELEASE_COMPONENTS.some((c) => features.has(c))) features.add("release-path");
  return features;
}

export function applies(flow: Flow, features: ReadonlySet<string>): boolean {
  const unless = [flow.unless ?? []].flat();
  return (!flow.when || features.has(flow.when)) && !unless.some((f) => features.has(f));
}

/** The pods (or the address) an end of a flow stands for in this rendering: a workload's are every Deployment of it (both colours). */
export function endpoints(ref: EndpointRef, rendering: Rendering): Endpoint[] {
  if ("address" in ref) return [{ kind: "address", ip: ref.address }];
  const namespaceObject = rendering.objects.find((o) => o.kind === "Namespace");
  const labelsOf = (namespace: string) =>
    namespaceLabels(namespace, namespaceObject?.metadata.name === namespace ? namespaceObject.metadata.labels : {});
  if ("pods" in ref)
    return [{ kind: "pod", namespace: ref.namespace, namespaceLabels: labelsOf(ref.namespace), labels: ref.labels }];
  const deployments = rendering.objects.filter((o) => o.kind === "Deployment") as (K8sObject & Deployment)[];
  const pods: PodEndpoint[] = deployments
    .filter((d) => d.spec!.template.metadata?.labels?.["app.kubernetes.io/name"] === ref.workload)
    .map((d) => ({
      kind: "pod",
      namespace: d.metadata.namespace!,
      namespaceLabels: labelsOf(d.metadata.namespace!),
      labels: d.spec!.template.metadata!.labels!,
      namedPorts: Object.fromEntries(
        d.spec!.template.spec!.containers.flatMap((c) =>
          (c.ports ?? [])
            .filter((p) => p.name)
            .map((p) => [p.name!, { port: p.containerPort, protocol: (p.protocol ?? "TCP") as Protocol }]),
        ),
      ),
    }));
  if (pods.length === 0) throw new Error(`${rendering.name}: no Deployment runs ${ref.workload}`);
  return pods;
}

export const nameOf = (ref: EndpointRef): string =>
  "workload" in ref ? ref.workload : "address" in ref ? ref.name : ref.pods;

/** Each pod × port of the flow that does not get through, with the end that stops it; `tried` counts every one. */
export function blocked(flow: Flow, rendering: Rendering): { failures: string[]; tried: number } {
  const policies = rendering.objects.filter((o) => o.kind === "NetworkPolicy") as unknown as NetworkPolicy[];
  const failures: string[] = [];
  let tried = 0;
  for (const from of endpoints(flow.from, rendering)) {
    for (const to of endpoints(flow.to, rendering)) {
      for (const { port, protocol } of flow.ports) {
        tried += 1;
        const { egress, ingress } = connection(policies, from, to, port, protocol);
        const at = [...(egress.allowed ? [] : ["egress"]), ...(ingress.allowed ? [] : ["ingress"])];
        const colour = to.kind === "pod" && to.labels.version ? ` (${to.labels.version})` : "";
        if (at.length > 0)
          failures.push(
            `${rendering.name}: ${nameOf(flow.from)} → ${nameOf(flow.to)}${colour} ${port}/${protocol} stopped at ${at.join(" and ")}`,
          );
      }
    }
  }
  return { failures, tried };
}

export interface FlowReport {
  /** Required flows stopped somewhere: each one an error. */
  readonly stopped: string[];
  /** Denied flows that get through: each one an error. */
  readonly through: string[];
  /** Connections to the internet a pod of the suite is let through that no flow lists: each one an error. */
  readonly unlisted: string[];
  /** How many flow checks were made (flow × rendering). */
  readonly checked: number;
}

/** The ports a pod that leaks to the internet would use; each tried from every source of a rendering. */
const INTERNET_PORTS = [80, 443, 6443];

/** Each source × port to the internet the rendering's policies let through and no flow of `listed` names. */
function unlistedToInternet(rendering: Rendering, listed: readonly Flow[]): string[] {
  const policies = rendering.objects.filter((o) => o.kind === "NetworkPolicy") as unknown as NetworkPolicy[];
  const [internet] = endpoints(INTERNET, rendering);
  const workloads = rendering.objects
    .filter((o) => o.kind === "Deployment")
    .map((d) => (d as K8sObject & Deployment).spec!.template.metadata?.labels?.["app.kubernetes.io/name"] ?? "");
  const sources = new Map<string, EndpointRef>([
    ...workloads.map((workload) => [workload, { workload }] as const),
    // Pods of the suite's namespace only: the policies of other namespaces (Prometheus's, clients') are not the suite's.
    ...listed
      .filter((f) => "pods" in f.from && f.from.namespace === NAMESPACE)
      .map((f) => [nameOf(f.from), f.from] as const),
  ]);
  return [...sources.values()].flatMap((from) =>
    endpoints(from, rendering).flatMap((pod) =>
      INTERNET_PORTS.filter(
        (port) =>
          connection(policies, pod, internet!, port, "TCP").egress.allowed &&
          !listed.some(
            (f) => f.to === INTERNET && nameOf(f.from) === nameOf(from) && f.ports.some((p) => p.port === port),
          ),
      ).map(
        (port) => `${rendering.name}: ${nameOf(from)} → ${nameOf(INTERNET)} ${port}/TCP is allowed and listed nowhere`,
      ),
    ),
  );
}

export function checkFlows(
  repoRoot: string,
  renderings: readonly Rendering[],
  services: readonly ServiceSpec[],
  { wide = true } = {},
): FlowReport {
  const report = { stopped: [] as string[], through: [] as string[], unlisted: [] as string[], checked: 0 };
  for (const rendering of renderings) {
    const features = featuresOf(repoRoot, rendering);
    const allowed = [...requiredFlows(services), ...(wide ? wideFlows(services) : [])].filter((f) =>
      applies(f, features),
    );
    report.unlisted.push(...new Set(unlistedToInternet(rendering, allowed)));
    for (const flow of allowed) {
      report.stopped.push(...blocked(flow, rendering).failures);
      report.checked += 1;
    }
    for (const flow of deniedFlows(services).filter((f) => applies(f, features))) {
      const { failures, tried } = blocked(flow, rendering);
      if (failures.length < tried)
        report.through.push(
          `${rendering.name}: ${nameOf(flow.from)} → ${nameOf(flow.to)} ${flow.ports.map((p) => p.port).join(",")} gets through`,
        );
      report.checked += 1;
    }
  }
  return report;
}
