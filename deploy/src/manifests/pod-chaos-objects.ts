// Chaos Mesh PodChaos objects: what a drill applies on a cluster (`pnpm drill … --k8s`) and what
// deploy/k8s/components/chaos-drills ships, paused, for game days run by hand. One builder for
// both, so the manifests and the runner cannot drift apart.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { NAMESPACE, PART_OF_LABELS } from "./cluster-names.js";

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
  /** Where the object and its pods are: the runner's own namespace, else the manifests'. */
  readonly namespace?: string | undefined;
}

export function podKill(service: string, options: PodKillOptions): PodChaos {
  const namespace = options.namespace ?? NAMESPACE;
  return {
    apiVersion: "chaos-mesh.org/v1alpha1",
    kind: "PodChaos",
    metadata: {
      name: options.name ?? `drill-kill-${options.mode}-${service}`,
      namespace,
      labels: { ...PART_OF_LABELS, "loopguard/drill": "kill-pod", ...options.labels },
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
