// What the drill runner asks of the Kubernetes API from inside the cluster (its Job's
// ServiceAccount token): the target's pods (which are ready, which died), the orchestrator's
// endpoints (every replica's metrics page), and the PodChaos objects that kill pods (and the pods
// their status records killed).
// RUNNER_API_CALLS lists every call as data (manifests/drill-api-calls.ts): the Role in the
// chaos-drills component is generated from it, and the tests hold the client's real requests and
// the shipped Role to it.
import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  type KubeConfig,
  type V1Pod,
} from "@kubernetes/client-node";
import type { PodChaos } from "../../manifests/pod-chaos-objects.js";

const CHAOS = { group: "chaos-mesh.org", version: "v1alpha1", plural: "podchaos" } as const;

/** One pod of a service as the runner sees it: enough to tell a pod that died from one that did not. */
export interface PodState {
  readonly name: string;
  /** A pod replaced by its Deployment comes back under another uid (and name). */
  readonly uid: string;
  /** Ready and not terminating. */
  readonly ready: boolean;
  /** Being deleted (a deletionTimestamp). */
  readonly terminating: boolean;
  /** Its containers' restarts, summed: a container killed in place restarts. */
  readonly restarts: number;
}

export interface DrillKube {
  /** Every pod of the service, Ready or not, terminating or not. */
  pods(service: string): Promise<PodState[]>;
  /** Every endpoint of the service's Service on port `portName`, ready or not, by pod name → http://ip:port/metrics. */
  metricsUrls(service: string, portName: string): Promise<Map<string, string>>;
  createPodChaos(body: PodChaos): Promise<void>;
  /**
   * The names of the pods PodChaos `name`'s status records killed; none until Chaos Mesh's controller writes them (or
   * when it is gone). `undefined` when the runner's Role may not read PodChaos: one rendered by a release before the
   * runner read it, as the Role and the runner's image are upgraded apart.
   */
  podChaosKilled(name: string): Promise<string[] | undefined>;
  deletePodChaos(name: string): Promise<void>;
}

/** The part of a PodChaos's status read here (Chaos Mesh's api/v1alpha1 ChaosStatus): one record per pod it selected. */
interface ChaosStatus {
  readonly experiment?: {
    readonly containerRecords?: readonly { readonly id: string; readonly injectedCount?: number }[];
  };
}

/**
 * The pods a PodChaos's records say were killed. injectedCount, not phase: a pod-kill is one-shot,
 * its record goes back to "Not Injected" once done, and the count stays. Chaos Mesh counts an
 * injection only once the API server accepted its delete of the pod; a record's id is "namespace/name".
 */
function killedBy(status: ChaosStatus | undefined): string[] {
  return (status?.experiment?.containerRecords ?? [])
    .filter((record) => (record.injectedCount ?? 0) > 0)
    .map((record) => record.id.slice(record.id.indexOf("/") + 1));
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
    async pods(service) {
      const pods = await core.listNamespacedPod({ namespace, labelSelector: `app.kubernetes.io/name=${service}` });
      return pods.items.map((pod) => ({
        name: pod.metadata!.name!,
        uid: pod.metadata!.uid ?? pod.metadata!.name!,
        ready: ready(pod),
        terminating: Boolean(pod.metadata?.deletionTimestamp),
        restarts: (pod.status?.containerStatuses ?? []).reduce((sum, c) => sum + c.restartCount, 0),
      }));
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
    async podChaosKilled(name) {
      try {
        const chaos = (await custom.getNamespacedCustomObject({ ...CHAOS, namespace, name })) as {
          status?: ChaosStatus;
        };
        return killedBy(chaos.status);
      } catch (error) {
        if (!(error instanceof ApiException)) throw error;
        if (error.code === 403) return undefined;
        if (error.code === 404) return [];
        throw error;
      }
    },
    async deletePodChaos(name) {
      await custom.deleteNamespacedCustomObject({ ...CHAOS, namespace, name });
    },
  };
}
