// What the drill runner asks of the Kubernetes API from inside the cluster (its Job's
// ServiceAccount token): the target's ready pods, the orchestrator's endpoints (every replica's
// metrics page), and the PodChaos objects that kill pods. RUNNER_API_CALLS lists every call as
// data (manifests/drill-api-calls.ts): the Role in the chaos-drills component is generated from it, and the
// tests hold the client's real requests and the shipped Role to it.
import { CoreV1Api, CustomObjectsApi, DiscoveryV1Api, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import type { PodChaos } from "../manifests/pod-chaos-objects.js";

const CHAOS = { group: "chaos-mesh.org", version: "v1alpha1", plural: "podchaos" } as const;

export interface DrillKube {
  /** Names of the service's pods that are Ready and not terminating. */
  readyPods(service: string): Promise<string[]>;
  /** Every endpoint of the service's Service on port `portName`, ready or not, by pod name → http://ip:port/metrics. */
  metricsUrls(service: string, portName: string): Promise<Map<string, string>>;
  createPodChaos(body: PodChaos): Promise<void>;
  deletePodChaos(name: string): Promise<void>;
}

function ready(pod: V1Pod): boolean {
  return (
    !pod.metadata?.deletionTimestamp &&
    (pod.status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True")
  );
}

/** The runner's client in `namespace` (its own, from the downward API). */
export function drillKube(config: KubeConfig, namespace: string): DrillKube {
  const core = config.makeApiClient(CoreV1Api);
  const discovery = config.makeApiClient(DiscoveryV1Api);
  const custom = config.makeApiClient(CustomObjectsApi);
  return {
    async readyPods(service) {
      const pods = await core.listNamespacedPod({ namespace, labelSelector: `app.kubernetes.io/name=${service}` });
      return pods.items.filter(ready).map((p) => p.metadata!.name!);
    },
    async metricsUrls(service, portName) {
      // A headless Service's slices list every pod it selects; a terminating one stays until it is gone, and may still answer.
      const slices = await discovery.listNamespacedEndpointSlice({
        namespace,
        labelSelector: `kubernetes.io/service-name=${service}`,
      });
      const urls = new Map<string, string>();
      for (const slice of slices.items) {
        const port = slice.ports?.find((p) => p.name === portName)?.port;
        if (port === undefined) continue;
        for (const endpoint of slice.endpoints) {
          const pod = endpoint.targetRef?.name ?? endpoint.addresses[0]!;
          const address = endpoint.addresses[0]!;
          urls.set(pod, `http://${slice.addressType === "IPv6" ? `[${address}]` : address}:${port}/metrics`);
        }
      }
      return urls;
    },
    async createPodChaos(body) {
      await custom.createNamespacedCustomObject({ ...CHAOS, namespace, body });
    },
    async deletePodChaos(name) {
      await custom.deleteNamespacedCustomObject({ ...CHAOS, namespace, name });
    },
  };
}
