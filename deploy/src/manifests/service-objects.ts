// The Kubernetes objects of each service, derived from its package manifest ("loopguard": kind,
// ports, variable prefix, store, secret files) and the contracts' SLO rules, so adding a tool
// service adds its Deployment, Services, policies, autoscaler and monitoring without anyone
// writing YAML. Hand-written parts (namespace, default-deny, the OpenTelemetry Collector,
// overlays) live beside the generated ones under deploy/k8s.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type {
  Container,
  EnvVar,
  Probe,
  SecurityContext,
  Service,
  ServiceAccount,
  Volume,
  VolumeMount,
} from "kubernetes-types/core/v1.js";
import type { NetworkPolicy, NetworkPolicyPeer } from "kubernetes-types/networking/v1.js";
import {
  API_CLIENT_LABEL,
  appLabels,
  callKeysSecret,
  JWKS_SECRET,
  PORT_GRPC,
  PORT_HTTP,
  podSelector,
  serviceHost,
  serviceMetadata,
  TELEMETRY_CONFIG_MAP,
} from "./cluster-names.js";
import { PROMETHEUS_PEER } from "./monitoring-objects.js";
import {
  CPU_REQUEST_MILLICORES,
  PRE_STOP_SECONDS,
  SHUTDOWN_GRACE_MS,
  STARTUP_PERIOD_SECONDS,
  startupBudgetSeconds,
  TERMINATION_GRACE_SECONDS,
} from "./pod-timings.js";

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

/** "loopguard-risk-pepper/pepper" → the secret, the key and where the file is mounted. */
export interface SecretFile {
  readonly secret: string;
  readonly key: string;
  readonly dir: string;
  readonly path: string;
}

export function secretFile(ref: string): SecretFile {
  const [secret, key] = ref.split("/") as [string, string];
  const dir = `/etc/loopguard/${secret.replace(/^loopguard-/, "")}`;
  return { secret, key, dir, path: `${dir}/${key}` };
}

/** The pod's volume of a secret file: that one key of its Secret, readable by the pod's group alone. */
export function secretVolume(file: SecretFile): Volume {
  return {
    name: file.secret,
    secret: { secretName: file.secret, items: [{ key: file.key, path: file.key }], defaultMode: 0o440 },
  };
}

export function secretMount(file: SecretFile): VolumeMount {
  return { name: file.secret, mountPath: file.dir, readOnly: true };
}

/**
 * Variable → secret file of a service: the JWKS every service verifies tokens with, a tool's own
 * call key (the orchestrator's call credentials), plus what the service declares.
 */
function secretFilesOf(spec: ServiceSpec): [string, ReturnType<typeof secretFile>][] {
  const callKeys = spec.kind === "tool" ? { [`${spec.envPrefix}_CALL_KEYS_FILE`]: callKeysSecret(spec.name) } : {};
  return Object.entries({ LOOPGUARD_JWKS_FILE: JWKS_SECRET, ...callKeys, ...spec.secretFiles }).map(([name, ref]) => [
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
      ...secrets.map(secretVolume),
    ],
    mounts: [{ name: "data", mountPath: DATA_DIR }, { name: "tmp", mountPath: "/tmp" }, ...secrets.map(secretMount)],
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
  return {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: serviceMetadata(spec),
    automountServiceAccountToken: false,
  };
}

/** Headless, so DNS answers every ready pod and gRPC clients balance per call instead of per connection. */
export function headlessService(spec: ServiceSpec): Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: serviceMetadata(spec),
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
    metadata: serviceMetadata(spec),
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
    metadata: serviceMetadata(spec),
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
/**
 * A kustomize replacement copying the image `spec`'s Deployment runs, as the overlay pinned it, to
 * `targets`: objects a component adds where the overlay's `images:` may already have run.
 */
export function deploymentImageReplacement(spec: ServiceSpec, targets: readonly object[]): object {
  return {
    source: {
      kind: "Deployment",
      name: spec.name,
      fieldPath: `spec.template.spec.containers.[name=${spec.name}].image`,
    },
    targets,
  };
}

export function serviceObjects(spec: ServiceSpec, services: readonly ServiceSpec[]): object[] {
  const tools = services.filter((s) => s.kind === "tool");
  return [serviceAccount(spec), headlessService(spec), deployment(spec, tools), networkPolicy(spec, services)];
}
