// The migration step of a stateful service on Kubernetes. Serving containers never migrate
// (<PREFIX>_MIGRATE_ON_START=false): they check the schema at start and refuse one they lack
// migrations of, so their startup probe times only bounded work.
// - PostgreSQL (components/postgres-stores): a Job per service runs `migrate` from the release's
//   image, once per release; every pod holds in an init container (`wait-for-schema`) until the
//   schema holds what its image needs, so with a plain `kubectl apply` of Job and Deployments
//   together no new pod serves before the Job has migrated, and the old pods keep serving
//   (maxUnavailable 0) meanwhile.
// - SQLite (components/sqlite-volumes): the file is the pod's own (ReadWriteOnce, one replica,
//   Recreate), so the pod migrates it in an init container under SQLite's write lock.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Job } from "kubernetes-types/batch/v1.js";
import type { Container, EnvVar, PodSpec, Volume, VolumeMount } from "kubernetes-types/core/v1.js";
import { DATA_DIR, HARDENED_CONTAINER, RUN_AS, secretFile, secretMount, secretVolume } from "./service-objects.js";
import { NAMESPACE, POSTGRES_CLIENT_LABEL, PART_OF_LABELS } from "./cluster-names.js";
import { POSTGRES_CA_MOUNT, POSTGRES_CA_VOLUME, postgresDsn, seedDemoOff } from "./store-objects.js";

/** How long a new pod waits in its init container for the migrate Job before it fails and is restarted. */
export const SCHEMA_WAIT_SECONDS = 900;
/** A migration Job gives up after this; its transaction rolls back and the old pods keep serving. */
export const MIGRATE_DEADLINE_SECONDS = 1800;
/** Finished migrate Jobs stay this long for `kubectl logs`, then the cluster removes them (a later apply makes the next one). */
export const MIGRATE_JOB_TTL_SECONDS = 86_400;
export const MIGRATION_COMPONENT = "migration";
/** The init container of a pod on PostgreSQL that holds it until the schema is current. */
export const WAIT_FOR_SCHEMA = "wait-for-schema";

export function migrateJobName(spec: ServiceSpec): string {
  return `${spec.name}-migrate`;
}

export function migrateOnStartEnv(spec: ServiceSpec): EnvVar {
  return { name: `${spec.envPrefix}_MIGRATE_ON_START`, value: "false" };
}

export function sqliteStoreEnv(spec: ServiceSpec): EnvVar {
  return { name: `${spec.envPrefix}_STORE`, value: `sqlite:${DATA_DIR}/${spec.name}.db` };
}

/**
 * The secret files the service's schema commands read (schemaSecretFiles: risk's pepper, which keys
 * the rows its migrations write), as the pod mounts them; none of its others (the orchestrator's
 * signing key and call secrets stay out of a Job that runs a not yet gated image).
 */
function secretMounts(spec: ServiceSpec): { env: EnvVar[]; volumes: Volume[]; mounts: VolumeMount[] } {
  const files = (spec.schemaSecretFiles ?? []).map((name) => ({ name, file: secretFile(spec.secretFiles[name]!) }));
  return {
    env: files.map(({ name, file }) => ({ name, value: file.path })),
    volumes: files.map(({ file }) => secretVolume(file)),
    mounts: files.map(({ file }) => secretMount(file)),
  };
}

/** What a schema container needs to reach its database: the store, and on PostgreSQL the CA its DSN verifies with and no demo seeding (risk seeds by a migration). */
interface StoreAccess {
  readonly env: readonly EnvVar[];
  readonly mounts: readonly VolumeMount[];
}

function postgresAccess(spec: ServiceSpec): StoreAccess {
  const dsn = postgresDsn(spec);
  return { env: [dsn.env, ...seedDemoOff(spec)], mounts: [dsn.mount, POSTGRES_CA_MOUNT] };
}

/** `node dist/main.js <args>` from the service's image, with its store and secrets, hardened as the serving container. */
export function schemaContainer(
  spec: ServiceSpec,
  name: string,
  args: readonly string[],
  store: StoreAccess,
  image = `loopguard/${spec.name}`,
): Container {
  const secrets = secretMounts(spec);
  return {
    name,
    image,
    imagePullPolicy: "IfNotPresent",
    args: [...args],
    env: [...store.env, { name: "LOOPGUARD_DATA_DIR", value: DATA_DIR }, ...secrets.env],
    resources: { requests: { cpu: "50m", memory: "96Mi" }, limits: { cpu: "1", memory: "256Mi" } },
    securityContext: HARDENED_CONTAINER,
    volumeMounts: [
      { name: "data", mountPath: DATA_DIR },
      { name: "tmp", mountPath: "/tmp" },
      ...secrets.mounts,
      ...store.mounts,
    ],
  };
}

/** PostgreSQL: the pod waits for the schema its image needs; the migrate Job applies it. */
export function waitForSchemaInitContainer(spec: ServiceSpec): Container {
  return schemaContainer(
    spec,
    WAIT_FOR_SCHEMA,
    [WAIT_FOR_SCHEMA, "--timeout", String(SCHEMA_WAIT_SECONDS)],
    postgresAccess(spec),
  );
}

/** SQLite: the pod migrates its own file before serving; SQLite's write lock keeps a second opener out. */
export function migrateInitContainer(spec: ServiceSpec): Container {
  return schemaContainer(spec, "migrate", ["migrate"], { env: [sqliteStoreEnv(spec)], mounts: [] });
}

/** The pod of a migrate Job from `image`: what `pnpm release --k8s` creates from the live objects too. */
export function migratePodSpec(spec: ServiceSpec, image?: string): PodSpec {
  return {
    serviceAccountName: spec.name,
    automountServiceAccountToken: false,
    enableServiceLinks: false,
    restartPolicy: "Never",
    securityContext: {
      runAsNonRoot: true,
      runAsUser: RUN_AS,
      runAsGroup: RUN_AS,
      fsGroup: RUN_AS,
      seccompProfile: { type: "RuntimeDefault" },
    },
    containers: [schemaContainer(spec, "migrate", ["migrate"], postgresAccess(spec), image)],
    volumes: [
      { name: "data", emptyDir: { sizeLimit: "64Mi" } },
      { name: "tmp", emptyDir: { sizeLimit: "64Mi" } },
      ...secretMounts(spec).volumes,
      postgresDsn(spec).volume,
      POSTGRES_CA_VOLUME,
    ],
  };
}

export function migrateJobLabels(spec: ServiceSpec): Record<string, string> {
  // Not the service's own name label: its Service, PDB and policies select pods by that.
  return {
    "app.kubernetes.io/name": migrateJobName(spec),
    "app.kubernetes.io/component": MIGRATION_COMPONENT,
    ...PART_OF_LABELS,
  };
}

/** One run of `migrate` per release, before the new pods serve (they wait for it in wait-for-schema). */
export function migrateJob(spec: ServiceSpec, name = migrateJobName(spec), image?: string): Job {
  const labels = migrateJobLabels(spec);
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name, namespace: NAMESPACE, labels },
    spec: {
      // A failed migration rolled back; one retry covers a lost connection, not a broken migration.
      backoffLimit: 1,
      activeDeadlineSeconds: MIGRATE_DEADLINE_SECONDS,
      ttlSecondsAfterFinished: MIGRATE_JOB_TTL_SECONDS,
      template: {
        metadata: { labels: { ...labels, [POSTGRES_CLIENT_LABEL]: "true" } },
        spec: migratePodSpec(spec, image),
      },
    },
  };
}

/** A strategic-merge patch of the service's Deployments (both colours): the schema step before the serving container, which only checks. */
export function migrationStepPatch(spec: ServiceSpec, init: Container): object {
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: spec.name, namespace: NAMESPACE },
    spec: {
      template: { spec: { initContainers: [init], containers: [{ name: spec.name, env: [migrateOnStartEnv(spec)] }] } },
    },
  };
}
