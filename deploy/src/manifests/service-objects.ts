// The Kubernetes objects of each service, derived from its package manifest ("loopguard": kind,
// ports, variable prefix, store, secret files) and the contracts' SLO rules, so adding a tool
// service adds its Deployment, Services, policies, autoscaler and monitoring without anyone
// writing YAML. Hand-written parts (namespace, default-deny, the OpenTelemetry Collector,
// overlays) live beside the generated ones under deploy/k8s.
import type { IPrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import type { IServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type {
  Container,
  EnvVar,
  PersistentVolumeClaim,
  Probe,
  SecurityContext,
  Service,
  ServiceAccount,
  Volume,
  VolumeMount,
} from "kubernetes-types/core/v1.js";
import type { ObjectMeta } from "kubernetes-types/meta/v1.js";
import type { NetworkPolicy, NetworkPolicyPeer } from "kubernetes-types/networking/v1.js";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.js";
import {
  CPU_REQUEST_MILLICORES,
  PRE_STOP_SECONDS,
  SHUTDOWN_GRACE_MS,
  STARTUP_PERIOD_SECONDS,
  startupBudgetSeconds,
  TERMINATION_GRACE_SECONDS,
} from "./pod-timings.js";
import type { RuleFile } from "./slo-rules.js";

export const NAMESPACE = "loopguard";
/** The uid and gid the images run as. */
export const RUN_AS = 10001;
export const DATA_DIR = "/data";
/** Every container of the suite: the image's user, nothing writable but its volumes, no privileges (Pod Security "restricted"). */
export const HARDENED_CONTAINER: SecurityContext = {
  runAsNonRoot: true,
  runAsUser: RUN_AS,
  runAsGroup: RUN_AS,
  readOnlyRootFilesystem: true,
  allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] },
  seccompProfile: { type: "RuntimeDefault" },
};
export const JWKS_SECRET = "loopguard-jwks/jwks.json";
/** Where Prometheus runs (kube-prometheus and kube-prometheus-stack defaults); its pods may scrape the HTTP ports. */
export const PROMETHEUS_PEER: NetworkPolicyPeer = {
  namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } },
  podSelector: { matchLabels: { "app.kubernetes.io/name": "prometheus" } },
};
/** Pods in any namespace with this label may call the orchestrator's API and open its dashboard. */
export const API_CLIENT_LABEL = "loopguard/api-client";
/** ConfigMap (made by the base's configMapGenerator) with the OTEL_* variables every service shares. */
export const TELEMETRY_CONFIG_MAP = "loopguard-telemetry";
export const POSTGRES_PORT = 5432;

const PORT_GRPC = "grpc";
const PORT_HTTP = "http";

export function appLabels(spec: ServiceSpec): Record<string, string> {
  return {
    "app.kubernetes.io/name": spec.name,
    "app.kubernetes.io/component": spec.kind,
    "app.kubernetes.io/part-of": "loopguard",
  };
}

export function podSelector(spec: ServiceSpec): Record<string, string> {
  return { "app.kubernetes.io/name": spec.name };
}

function metadata(spec: ServiceSpec, name = spec.name): ObjectMeta & { name: string; namespace: string } {
  return { name, namespace: NAMESPACE, labels: appLabels(spec) };
}

/**
 * The DNS name of a Service, for a caller in the same namespace: the short name, resolved through
 * the pod's search path (its own namespace first), so no object names the namespace the overlay
 * puts the suite in.
 */
export function serviceHost(name: string): string {
  return name;
}

/** "loopguard-risk-pepper/pepper" → the secret, the key and where the file is mounted. */
export function secretFile(ref: string): { secret: string; key: string; dir: string; path: string } {
  const [secret, key] = ref.split("/") as [string, string];
  const dir = `/etc/loopguard/${secret.replace(/^loopguard-/, "")}`;
  return { secret, key, dir, path: `${dir}/${key}` };
}

/** Variable → secret file of a service: the JWKS every service verifies tokens with, plus its own. */
function secretFilesOf(spec: ServiceSpec): [string, ReturnType<typeof secretFile>][] {
  return Object.entries({ LOOPGUARD_JWKS_FILE: JWKS_SECRET, ...spec.secretFiles }).map(([name, ref]) => [
    name,
    secretFile(ref),
  ]);
}

function grpcProbe(spec: ServiceSpec, periodSeconds: number, failureThreshold: number, timeoutSeconds = 1): Probe {
  return { grpc: { port: spec.port }, periodSeconds, failureThreshold, timeoutSeconds };
}

function env(spec: ServiceSpec, tools: readonly ServiceSpec[]): EnvVar[] {
  const own: EnvVar[] = [
    { name: `${spec.envPrefix}_HOST`, value: "0.0.0.0" },
    { name: `${spec.envPrefix}_PORT`, value: String(spec.port) },
    { name: spec.metricsPortEnv, value: String(spec.metricsPort) },
    { name: `${spec.envPrefix}_SHUTDOWN_GRACE_MS`, value: String(SHUTDOWN_GRACE_MS) },
    { name: "LOOPGUARD_DATA_DIR", value: DATA_DIR },
    ...secretFilesOf(spec).map(([name, file]) => ({ name, value: file.path })),
    { name: "OTEL_SERVICE_NAME", value: spec.name },
  ];
  // The orchestrator reaches every tool through its headless Service: grpc-js resolves every
  // ready pod's address and balances per call (round_robin).
  const targets =
    spec.kind === "orchestrator"
      ? tools.map((t) => ({ name: `${t.envPrefix}_ADDR`, value: `dns:///${serviceHost(t.name)}:${t.port}` }))
      : [];
  return [...own, ...targets];
}

function volumes(spec: ServiceSpec): { volumes: Volume[]; mounts: VolumeMount[] } {
  const secrets = secretFilesOf(spec).map(([, file]) => file);
  return {
    volumes: [
      { name: "data", emptyDir: { sizeLimit: "1Gi" } },
      { name: "tmp", emptyDir: { sizeLimit: "64Mi" } },
      ...secrets.map((file) => ({
        name: file.secret,
        secret: { secretName: file.secret, items: [{ key: file.key, path: file.key }], defaultMode: 0o440 },
      })),
    ],
    mounts: [
      { name: "data", mountPath: DATA_DIR },
      { name: "tmp", mountPath: "/tmp" },
      ...secrets.map((file) => ({ name: file.secret, mountPath: file.dir, readOnly: true })),
    ],
  };
}

function container(spec: ServiceSpec, tools: readonly ServiceSpec[], mounts: VolumeMount[]): Container {
  const orchestrator = spec.kind === "orchestrator";
  return {
    name: spec.name,
    // The overlays give every image its registry and tag (kustomize `images:`).
    image: `loopguard/${spec.name}`,
    imagePullPolicy: "IfNotPresent",
    ports: [
      { name: PORT_GRPC, containerPort: spec.port, protocol: "TCP" },
      { name: PORT_HTTP, containerPort: spec.metricsPort, protocol: "TCP" },
    ],
    env: env(spec, tools),
    envFrom: [{ configMapRef: { name: TELEMETRY_CONFIG_MAP } }],
    resources: {
      requests: { cpu: `${CPU_REQUEST_MILLICORES[spec.kind]}m`, memory: orchestrator ? "256Mi" : "128Mi" },
      limits: orchestrator ? { cpu: "2", memory: "512Mi" } : { cpu: "1", memory: "256Mi" },
    },
    // Health is grpc.health.v1 on the gRPC port; it turns NOT_SERVING as soon as the drain starts.
    // A health check costs microseconds of CPU: one that takes seconds means the event loop was
    // stalled (a throttled pod, a long GC), so it takes three in a row, 15 s, to leave the Service
    // (a terminating pod leaves at once, whatever its probes), and 30 s of them to be restarted.
    startupProbe: grpcProbe(spec, STARTUP_PERIOD_SECONDS, startupBudgetSeconds(spec) / STARTUP_PERIOD_SECONDS),
    readinessProbe: grpcProbe(spec, 5, 3, 3),
    livenessProbe: grpcProbe(spec, 10, 3, 5),
    lifecycle: { preStop: { sleep: { seconds: PRE_STOP_SECONDS } } },
    securityContext: HARDENED_CONTAINER,
    volumeMounts: mounts,
  };
}

function serviceAccount(spec: ServiceSpec): ServiceAccount {
  return { apiVersion: "v1", kind: "ServiceAccount", metadata: metadata(spec), automountServiceAccountToken: false };
}

/** Headless, so DNS answers every ready pod and gRPC clients balance per call instead of per connection. */
export function headlessService(spec: ServiceSpec): Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: metadata(spec),
    spec: {
      clusterIP: "None",
      selector: podSelector(spec),
      ports: [
        { name: PORT_GRPC, port: spec.port, targetPort: PORT_GRPC, protocol: "TCP" },
        { name: PORT_HTTP, port: spec.metricsPort, targetPort: PORT_HTTP, protocol: "TCP" },
      ],
    },
  };
}

export function deployment(spec: ServiceSpec, tools: readonly ServiceSpec[]): Deployment {
  const { volumes: podVolumes, mounts } = volumes(spec);
  const spread = (topologyKey: string) => ({
    maxSkew: 1,
    topologyKey,
    whenUnsatisfiable: "ScheduleAnyway",
    labelSelector: { matchLabels: podSelector(spec) },
    matchLabelKeys: ["pod-template-hash"],
  });
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    // No replicas: one by default, and the HorizontalPodAutoscaler owns the count where there is one.
    metadata: metadata(spec),
    spec: {
      revisionHistoryLimit: 5,
      selector: { matchLabels: podSelector(spec) },
      strategy: { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      template: {
        metadata: { labels: appLabels(spec) },
        spec: {
          serviceAccountName: spec.name,
          automountServiceAccountToken: false,
          // Service links would set e.g. KB_SEARCH_PORT=tcp://… and clash with the services' own variables.
          enableServiceLinks: false,
          terminationGracePeriodSeconds: TERMINATION_GRACE_SECONDS,
          securityContext: {
            runAsNonRoot: true,
            runAsUser: RUN_AS,
            runAsGroup: RUN_AS,
            fsGroup: RUN_AS,
            seccompProfile: { type: "RuntimeDefault" },
          },
          topologySpreadConstraints: [spread("topology.kubernetes.io/zone"), spread("kubernetes.io/hostname")],
          affinity: {
            podAntiAffinity: {
              preferredDuringSchedulingIgnoredDuringExecution: [
                {
                  weight: 100,
                  podAffinityTerm: {
                    topologyKey: "kubernetes.io/hostname",
                    labelSelector: { matchLabels: podSelector(spec) },
                  },
                },
              ],
            },
          },
          containers: [container(spec, tools, mounts)],
          volumes: podVolumes,
        },
      },
    },
  };
}

/**
 * What may reach the service and what it may reach, on top of the namespace's default deny and
 * its shared DNS and telemetry egress: the orchestrator calls every tool's gRPC port, labelled
 * API clients call the orchestrator, Prometheus scrapes every HTTP port.
 */
function networkPolicy(spec: ServiceSpec, services: readonly ServiceSpec[]): NetworkPolicy {
  const orchestrators = services.filter((s) => s.kind === "orchestrator");
  const tools = services.filter((s) => s.kind === "tool");
  const grpcFrom: NetworkPolicyPeer[] =
    spec.kind === "orchestrator"
      ? [{ namespaceSelector: {}, podSelector: { matchLabels: { [API_CLIENT_LABEL]: "true" } } }]
      : orchestrators.map((o) => ({ podSelector: { matchLabels: podSelector(o) } }));
  const httpFrom = spec.kind === "orchestrator" ? [PROMETHEUS_PEER, ...grpcFrom] : [PROMETHEUS_PEER];
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: metadata(spec),
    spec: {
      podSelector: { matchLabels: podSelector(spec) },
      policyTypes: ["Ingress", "Egress"],
      ingress: [
        { from: grpcFrom, ports: [{ protocol: "TCP", port: spec.port }] },
        { from: httpFrom, ports: [{ protocol: "TCP", port: spec.metricsPort }] },
      ],
      ...(spec.kind === "orchestrator"
        ? {
            egress: tools.map((t) => ({
              to: [{ podSelector: { matchLabels: podSelector(t) } }],
              ports: [{ protocol: "TCP", port: t.port }],
            })),
          }
        : {}),
    },
  };
}

/** Base objects of one service: its identity, Service, workload and network policy. */
export function serviceObjects(spec: ServiceSpec, services: readonly ServiceSpec[]): object[] {
  const tools = services.filter((s) => s.kind === "tool");
  return [serviceAccount(spec), headlessService(spec), deployment(spec, tools), networkPolicy(spec, services)];
}

/** Scrapes /metrics on the HTTP port; prometheus-operator names the job after the Service, the tool name the Down alerts watch. */
export function serviceMonitor(spec: ServiceSpec): IServiceMonitor {
  return {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "ServiceMonitor",
    metadata: metadata(spec),
    spec: {
      selector: { matchLabels: podSelector(spec) },
      endpoints: [{ port: PORT_HTTP, path: "/metrics", interval: "15s" }],
    },
  };
}

/** The same rule groups as deploy/prometheus/rules.yml. */
export function prometheusRule(rules: RuleFile): IPrometheusRule {
  return {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "PrometheusRule",
    metadata: { name: "loopguard-slo", namespace: NAMESPACE, labels: { "app.kubernetes.io/part-of": "loopguard" } },
    spec: {
      groups: rules.groups.map((group) => ({
        name: group.name,
        rules: group.rules as NonNullable<IPrometheusRule["spec"]["groups"]>[number]["rules"],
      })),
    },
  };
}

/** The autoscaler's bound; the PostgreSQL connection budget (postgres-budget.ts) is derived from it. */
export function maxReplicas(spec: ServiceSpec): number {
  return spec.kind === "orchestrator" ? 6 : 10;
}

export function horizontalPodAutoscaler(spec: ServiceSpec): HorizontalPodAutoscaler {
  return {
    apiVersion: "autoscaling/v2",
    kind: "HorizontalPodAutoscaler",
    metadata: metadata(spec),
    spec: {
      scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: spec.name },
      minReplicas: 2,
      maxReplicas: maxReplicas(spec),
      metrics: [
        { type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 70 } } },
      ],
      behavior: {
        scaleUp: { stabilizationWindowSeconds: 0, policies: [{ type: "Pods", value: 2, periodSeconds: 30 }] },
        scaleDown: { stabilizationWindowSeconds: 300, policies: [{ type: "Pods", value: 1, periodSeconds: 60 }] },
      },
    },
  };
}

export function podDisruptionBudget(spec: ServiceSpec): PodDisruptionBudget {
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: metadata(spec),
    spec: {
      maxUnavailable: 1,
      selector: { matchLabels: podSelector(spec) },
      // A crash-looping pod must not block a node drain.
      unhealthyPodEvictionPolicy: "AlwaysAllow",
    },
  };
}

export function storeSecret(spec: ServiceSpec): string {
  return `loopguard-${spec.name}-store`;
}

/** A strategic-merge patch of a service's Deployment: `pod` merges into the pod template. */
function deploymentPatch(
  spec: ServiceSpec,
  deploymentSpec: Record<string, unknown>,
  pod: { labels?: Record<string, string>; spec: Record<string, unknown> },
): object {
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: spec.name, namespace: NAMESPACE },
    spec: {
      ...deploymentSpec,
      template: { ...(pod.labels ? { metadata: { labels: pod.labels } } : {}), spec: pod.spec },
    },
  };
}

/**
 * Single-replica SQLite for a stateful service: its store on a PersistentVolumeClaim, so a
 * restarted or rescheduled pod keeps its sessions and ledger; Recreate, because a volume
 * mounted ReadWriteOnce and a SQLite file take one pod at a time.
 */
export function sqliteVolume(spec: ServiceSpec): { claim: PersistentVolumeClaim; patch: object } {
  const claimName = `${spec.name}-data`;
  return {
    claim: {
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: metadata(spec, claimName),
      spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
    },
    patch: deploymentPatch(
      spec,
      { strategy: { type: "Recreate", rollingUpdate: null } },
      {
        spec: {
          containers: [
            {
              name: spec.name,
              env: [{ name: `${spec.envPrefix}_STORE`, value: `sqlite:${DATA_DIR}/${spec.name}.db` }],
            },
          ],
          volumes: [{ name: "data", emptyDir: null, persistentVolumeClaim: { claimName } }],
        },
      },
    ),
  };
}

/** Pods that open connections to PostgreSQL carry this label; the database's own policy admits them. */
export const POSTGRES_CLIENT_LABEL = "loopguard/postgres-client";

/**
 * The database's CA certificate: CloudNativePG's `<cluster>-ca` Secret (the cluster is
 * loopguard-postgres), or one made by hand of that name with a managed database's CA bundle. Only
 * `ca.crt` is projected into the pods: the operator's Secret holds the CA's key too.
 */
export const POSTGRES_CA_SECRET = "loopguard-postgres-ca";
export const POSTGRES_CA_DIR = "/etc/loopguard/postgres-ca";
/** What a DSN's sslrootcert names (sslmode=verify-full&sslrootcert=…). */
export const POSTGRES_CA_FILE = `${POSTGRES_CA_DIR}/ca.crt`;

/**
 * PostgreSQL for a stateful service: the DSN comes from the Secret loopguard-<service>-store, key
 * `dsn`; the pool its share of the connection budget; the CA its DSN's sslrootcert names; and no
 * demo data, since a shared database is a real one.
 */
/** The database's CA (ca.crt only), mounted where the DSNs' sslrootcert points, for every container that connects. */
export const POSTGRES_CA_MOUNT: VolumeMount = { name: POSTGRES_CA_SECRET, mountPath: POSTGRES_CA_DIR, readOnly: true };
export const POSTGRES_CA_VOLUME: Volume = {
  name: POSTGRES_CA_SECRET,
  secret: { secretName: POSTGRES_CA_SECRET, items: [{ key: "ca.crt", path: "ca.crt" }], defaultMode: 0o440 },
};

/** The stateful tools seed demo rows (orders; customers, by a migration), never on a production database; the orchestrator's sessions have none. */
export function seedDemoOff(spec: ServiceSpec): EnvVar[] {
  return spec.kind === "tool" ? [{ name: `${spec.envPrefix}_SEED_DEMO`, value: "false" }] : [];
}

export function postgresStore(spec: ServiceSpec, poolSize: number): object {
  const env: EnvVar[] = [
    { name: `${spec.envPrefix}_STORE`, valueFrom: { secretKeyRef: { name: storeSecret(spec), key: "dsn" } } },
    { name: `${spec.envPrefix}_STORE_POOL_SIZE`, value: String(poolSize) },
    ...seedDemoOff(spec),
  ];
  return deploymentPatch(
    spec,
    {},
    {
      labels: { [POSTGRES_CLIENT_LABEL]: "true" },
      spec: {
        containers: [{ name: spec.name, env, volumeMounts: [POSTGRES_CA_MOUNT] }],
        volumes: [POSTGRES_CA_VOLUME],
      },
    },
  );
}

/** Stateful services may open connections to PostgreSQL (in the cluster or a managed database outside it). */
export function postgresEgress(): NetworkPolicy {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: "postgres-egress", namespace: NAMESPACE, labels: { "app.kubernetes.io/part-of": "loopguard" } },
    spec: {
      podSelector: { matchLabels: { [POSTGRES_CLIENT_LABEL]: "true" } },
      policyTypes: ["Egress"],
      egress: [{ ports: [{ protocol: "TCP", port: POSTGRES_PORT }] }],
    },
  };
}
