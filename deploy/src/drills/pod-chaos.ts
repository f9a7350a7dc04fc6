// Chaos Mesh PodChaos objects: what a drill applies on a cluster (`pnpm drill … --k8s`) and what
// deploy/k8s/components/chaos-drills ships, paused, for game days run by hand. One builder for
// both, so the manifests and the runner cannot drift apart.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { NAMESPACE } from "../containers/cluster-dns.js";

export type KillMode = "one" | "all";

/** The annotation Chaos Mesh reads to hold an experiment until it is removed. */
export const PAUSE_ANNOTATION = "experiment.chaos-mesh.org/pause";

export interface PodChaos {
  readonly apiVersion: "chaos-mesh.org/v1alpha1";
  readonly kind: "PodChaos";
  readonly metadata: {
    readonly name: string;
    readonly namespace: string;
    readonly labels: Readonly<Record<string, string>>;
    readonly annotations?: Readonly<Record<string, string>>;
  };
  readonly spec: {
    readonly action: "pod-kill";
    readonly mode: KillMode;
    readonly selector: { readonly labelSelectors: Readonly<Record<string, string>> };
    /** 0: the pod is deleted at once, its containers killed without a SIGTERM (a SIGKILL drill). */
    readonly gracePeriod: 0;
  };
}

export interface PodKillOptions {
  readonly mode: KillMode;
  /** The object's name; a run gives each of its kills its own. */
  readonly name?: string;
  /** Shipped manifests are paused: applying the component starts nothing. */
  readonly paused?: boolean;
  /** Labels naming the drill run that made the object, so it can be found and removed. */
  readonly labels?: Readonly<Record<string, string>>;
}

export function podKill(service: string, options: PodKillOptions): PodChaos {
  return {
    apiVersion: "chaos-mesh.org/v1alpha1",
    kind: "PodChaos",
    metadata: {
      name: options.name ?? `drill-kill-${options.mode}-${service}`,
      namespace: NAMESPACE,
      labels: { "app.kubernetes.io/part-of": "loopguard", "loopguard/drill": "kill-pod", ...options.labels },
      ...(options.paused ? { annotations: { [PAUSE_ANNOTATION]: "true" } } : {}),
    },
    spec: {
      action: "pod-kill",
      mode: options.mode,
      // No `namespaces`: Chaos Mesh then picks pods in the PodChaos object's own namespace, the one the overlay chose.
      selector: { labelSelectors: { "app.kubernetes.io/name": service } },
      gracePeriod: 0,
    },
  };
}

/**
 * The shipped drills of one service, paused: a tool's pods can be killed one or all at once; the
 * orchestrator only one (its drill is a replica dying, the rest taking its sessions over).
 */
export function shippedPodKills(spec: ServiceSpec): PodChaos[] {
  const modes: KillMode[] = spec.kind === "tool" ? ["one", "all"] : ["one"];
  return modes.map((mode) => podKill(spec.name, { mode, paused: true }));
}

/** What the runner needs on a cluster: create and remove PodChaos, watch the pods it kills. */
export function drillRunnerRole(): object {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: { name: "loopguard-drill-runner", namespace: NAMESPACE, labels: { "app.kubernetes.io/part-of": "loopguard" } },
    rules: [
      { apiGroups: ["chaos-mesh.org"], resources: ["podchaos"], verbs: ["create", "get", "list", "delete", "patch"] },
      { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] },
    ],
  };
}
