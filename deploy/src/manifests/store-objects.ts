// Where a stateful service keeps its data: SQLite on a PersistentVolumeClaim, or PostgreSQL through a
// DSN Secret, the database's CA and an egress policy to its port.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { EnvVar, PersistentVolumeClaim, Volume, VolumeMount } from "kubernetes-types/core/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { NAMESPACE, PART_OF_LABELS, POSTGRES_CLIENT_LABEL, POSTGRES_PORT, serviceMetadata } from "./cluster-names.js";
import { DATA_DIR, secretFile, secretMount, secretVolume } from "./service-objects.js";

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
      metadata: serviceMetadata(spec, claimName),
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

/**
 * The database's CA certificate: CloudNativePG's `<cluster>-ca` Secret (the cluster is
 * loopguard-postgres), or one made by hand of that name with a managed database's CA bundle. Only
 * `ca.crt` is projected into the pods: the operator's Secret holds the CA's key too.
 */
export const POSTGRES_CA_SECRET = "loopguard-postgres-ca";
export const POSTGRES_CA_DIR = "/etc/loopguard/postgres-ca";
/** What a DSN's sslrootcert names (sslmode=verify-full&sslrootcert=…). */
export const POSTGRES_CA_FILE = `${POSTGRES_CA_DIR}/ca.crt`;

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

/**
 * The DSN of a service's database, from the Secret loopguard-<service>-store (key `dsn`), as the file
 * <PREFIX>_STORE_FILE names: its password stays out of the container's environment, which process
 * listings, `kubectl exec … env` and child processes see.
 */
export function postgresDsn(spec: ServiceSpec): { env: EnvVar; volume: Volume; mount: VolumeMount } {
  const file = secretFile(`${storeSecret(spec)}/dsn`);
  return {
    env: { name: `${spec.envPrefix}_STORE_FILE`, value: file.path },
    volume: secretVolume(file),
    mount: secretMount(file),
  };
}

/**
 * PostgreSQL for a stateful service: the DSN as a file (postgresDsn); the pool its share of the
 * connection budget; the CA its DSN's sslrootcert names; and no demo data, since a shared database
 * is a real one.
 */
export function postgresStore(spec: ServiceSpec, poolSize: number): object {
  const dsn = postgresDsn(spec);
  const env: EnvVar[] = [
    dsn.env,
    { name: `${spec.envPrefix}_STORE_POOL_SIZE`, value: String(poolSize) },
    ...seedDemoOff(spec),
  ];
  return deploymentPatch(
    spec,
    {},
    {
      labels: { [POSTGRES_CLIENT_LABEL]: "true" },
      spec: {
        containers: [{ name: spec.name, env, volumeMounts: [dsn.mount, POSTGRES_CA_MOUNT] }],
        volumes: [dsn.volume, POSTGRES_CA_VOLUME],
      },
    },
  );
}

/** Stateful services may open connections to PostgreSQL (in the cluster or a managed database outside it). */
export function postgresEgress(): NetworkPolicy {
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: "postgres-egress", namespace: NAMESPACE, labels: { ...PART_OF_LABELS } },
    spec: {
      podSelector: { matchLabels: { [POSTGRES_CLIENT_LABEL]: "true" } },
      policyTypes: ["Egress"],
      egress: [{ ports: [{ protocol: "TCP", port: POSTGRES_PORT }] }],
    },
  };
}
