// What the drill runner asks of the Kubernetes API from inside the cluster (its Job's
// ServiceAccount token): the target's pods (which are ready, which died), the orchestrator's
// endpoints (every replica's metrics page), and the PodChaos objects that kill pods (and the pods
// their status records killed).
// RUNNER_API_CALLS lists every call as data (manifests/drill-api-calls.ts): the Role in the
// chaos-drills component is generated from it, and the tests hold the client's real requests and
// the shipped Role to it.
import {
  ApiException,
  type Configuration,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  createConfiguration,
  DiscoveryV1Api,
  type KubeConfig,
  type Middleware,
  ServerConfiguration,
  type V1Lease,
  type V1MicroTime,
  type V1Pod,
} from "@kubernetes/client-node";
import { DRILL_LEASE } from "../../manifests/drill-api-calls.js";
import type { PodChaos } from "../../manifests/pod-chaos-objects.js";
import { DrillError } from "./drill-error.js";

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
  /** The drills' Lease (DRILL_LEASE) as stored; undefined when there is none. */
  readLease(): Promise<StoredLease | undefined>;
  /**
   * Creates the Lease (no `resourceVersion`) or replaces the one stored at `resourceVersion`; the
   * new resourceVersion, or undefined when another write came first (409: it exists, or it changed).
   */
  writeLease(lease: DrillLeaseSpec, resourceVersion?: string): Promise<string | undefined>;
  /** Deletes the Lease if it is still at `resourceVersion`; another holder's since is left alone. */
  deleteLease(resourceVersion: string): Promise<void>;
}

export interface DrillLeaseSpec {
  /** The run's id. */
  readonly holder: string;
  readonly acquired: Date;
  readonly renewed: Date;
  /** How long after `renewed` the Lease is another runner's to take. */
  readonly durationS: number;
}

export interface StoredLease extends Partial<DrillLeaseSpec> {
  readonly resourceVersion: string;
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

/** A Lease's times as the API client hands them over (a Date), or as kubectl prints them (text). */
const timeOf = (time: V1MicroTime | string) => new Date(time);

/** The drills' Lease as the API client reads it, or as `kubectl get lease -o json` prints it. */
export function leaseOf(lease: {
  readonly metadata?: { readonly resourceVersion?: string };
  readonly spec?: {
    readonly holderIdentity?: string;
    readonly acquireTime?: V1MicroTime | string;
    readonly renewTime?: V1MicroTime | string;
    readonly leaseDurationSeconds?: number;
  };
}): StoredLease {
  const spec = lease.spec ?? {};
  return {
    resourceVersion: lease.metadata?.resourceVersion ?? "",
    ...(spec.holderIdentity ? { holder: spec.holderIdentity } : {}),
    ...(spec.acquireTime ? { acquired: timeOf(spec.acquireTime) } : {}),
    ...(spec.renewTime ? { renewed: timeOf(spec.renewTime) } : {}),
    ...(spec.leaseDurationSeconds === undefined ? {} : { durationS: spec.leaseDurationSeconds }),
  };
}

function leaseBody(lease: DrillLeaseSpec, namespace: string, resourceVersion?: string): V1Lease {
  return {
    apiVersion: "coordination.k8s.io/v1",
    kind: "Lease",
    metadata: { name: DRILL_LEASE, namespace, ...(resourceVersion ? { resourceVersion } : {}) },
    spec: {
      holderIdentity: lease.holder,
      acquireTime: lease.acquired,
      renewTime: lease.renewed,
      leaseDurationSeconds: lease.durationS,
    },
  };
}

/** An API error with this HTTP status (404: none; 409: another write came first). */
const isStatus = (error: unknown, code: number) => error instanceof ApiException && error.code === code;

/** A refusal of the Lease's calls, as what to do: a Role rendered before the runner took the Lease. */
function leaseRefused(error: unknown, namespace: string): unknown {
  return isStatus(error, 403)
    ? new DrillError(
        `the runner's Role may not use Lease ${namespace}/${DRILL_LEASE}, which keeps drills one at a time: apply this release's chaos-drills component`,
      )
    : error;
}

/**
 * How long the runner waits for one API call. @kubernetes/client-node sets no deadline, so a call an
 * API server never answers would hang the run (a Lease renewal would hold up every later one).
 */
export const KUBE_CALL_TIMEOUT_MS = 10_000;

/** KubeConfig.makeApiClient's client, each of whose calls fails once `timeoutMs` pass without an answer. */
function apiClient<T>(config: KubeConfig, Api: new (configuration: Configuration) => T, timeoutMs: number): T {
  const cluster = config.getCurrentCluster();
  if (!cluster) throw new Error("the runner's kubeconfig names no cluster");
  const deadline: Middleware = {
    pre: async (request) => {
      request.setSignal(AbortSignal.timeout(timeoutMs));
      return request;
    },
    post: async (response) => response,
  };
  return new Api(
    createConfiguration({
      baseServer: new ServerConfiguration(cluster.server, {}),
      authMethods: { default: config },
      promiseMiddleware: [deadline],
    }),
  );
}

/** The runner's client in `namespace` (its own, from the downward API). */
export function drillKube(
  config: KubeConfig,
  namespace: string,
  { callTimeoutMs = KUBE_CALL_TIMEOUT_MS }: { callTimeoutMs?: number } = {},
): DrillKube {
  const core = apiClient(config, CoreV1Api, callTimeoutMs);
  const discovery = apiClient(config, DiscoveryV1Api, callTimeoutMs);
  const custom = apiClient(config, CustomObjectsApi, callTimeoutMs);
  const coordination = apiClient(config, CoordinationV1Api, callTimeoutMs);
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
    async readLease() {
      try {
        return leaseOf(await coordination.readNamespacedLease({ name: DRILL_LEASE, namespace }));
      } catch (error) {
        if (isStatus(error, 404)) return undefined;
        throw leaseRefused(error, namespace);
      }
    },
    async writeLease(lease, resourceVersion) {
      try {
        const body = leaseBody(lease, namespace, resourceVersion);
        const written = resourceVersion
          ? await coordination.replaceNamespacedLease({ name: DRILL_LEASE, namespace, body })
          : await coordination.createNamespacedLease({ namespace, body });
        return written.metadata?.resourceVersion ?? "";
      } catch (error) {
        if (isStatus(error, 409)) return undefined;
        throw leaseRefused(error, namespace);
      }
    },
    async deleteLease(resourceVersion) {
      try {
        await coordination.deleteNamespacedLease({
          name: DRILL_LEASE,
          namespace,
          body: { preconditions: { resourceVersion } },
        });
      } catch (error) {
        if (!isStatus(error, 404) && !isStatus(error, 409)) throw error;
      }
    },
  };
}
