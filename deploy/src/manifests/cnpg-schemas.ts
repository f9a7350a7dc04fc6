// Strict JSON Schemas of the CloudNativePG resources the cloudnative-pg component uses
// (postgresql.cnpg.io/v1: Cluster, Database, Pooler, ScheduledBackup), limited to the fields it
// sets, with the names, enums and patterns of the operator's CRDs (config/crd/bases in
// cloudnative-pg/cloudnative-pg, v1.30) and the PgBouncer parameters its webhook admits.
import { closed, localReference, metadata, quantity, type Schema, stringMap } from "./schema-parts.js";

const CNPG = "postgresql.cnpg.io/v1";
const str: Schema = { type: "string", minLength: 1 };
const secretKey: Schema = closed({ name: str, key: str }, ["name", "key"]);

function resource(kind: string, spec: Schema): Schema {
  return closed({ apiVersion: { const: CNPG }, kind: { const: kind }, metadata, spec }, [
    "apiVersion",
    "kind",
    "metadata",
    "spec",
  ]);
}

/** Role names PostgreSQL takes unquoted: what the services' DSNs name. */
const roleName: Schema = { type: "string", pattern: "^[a-z_][a-z0-9_]*$", maxLength: 63 };

const managedRole = closed(
  {
    name: roleName,
    ensure: { enum: ["present", "absent"] },
    login: { type: "boolean" },
    passwordSecret: localReference,
    connectionLimit: { type: "integer", minimum: -1 },
  },
  ["name"],
);

const barmanObjectStore = closed(
  {
    destinationPath: { type: "string", pattern: "^(s3|gs|https?)://" },
    endpointURL: { type: "string", pattern: "^https?://" },
    serverName: str,
    s3Credentials: closed({
      accessKeyId: secretKey,
      secretAccessKey: secretKey,
      region: secretKey,
      sessionToken: secretKey,
      inheritFromIAMRole: { type: "boolean" },
    }),
    wal: closed({
      compression: { enum: ["bzip2", "gzip", "lz4", "snappy", "xz", "zstd"] },
      maxParallel: { type: "integer", minimum: 1 },
    }),
    data: closed({
      compression: { enum: ["bzip2", "gzip", "lz4", "snappy", "xz", "zstd"] },
      jobs: { type: "integer", minimum: 1 },
    }),
  },
  ["destinationPath"],
);

const cluster = resource(
  "Cluster",
  closed(
    {
      instances: { type: "integer", minimum: 1 },
      imageName: str,
      primaryUpdateStrategy: { enum: ["unsupervised", "supervised"] },
      storage: closed({ size: quantity, storageClass: { type: "string" } }, ["size"]),
      bootstrap: closed({
        initdb: closed({ database: str, owner: str, secret: localReference }, ["database", "owner"]),
      }),
      managed: closed({ roles: { type: "array", items: managedRole } }),
      certificates: closed({ serverAltDNSNames: { type: "array", items: str } }),
      postgresql: closed({ parameters: stringMap }),
      backup: closed({ barmanObjectStore, retentionPolicy: { type: "string", pattern: "^[1-9][0-9]*[dwm]$" } }),
      resources: closed({
        requests: closed({ cpu: quantity, memory: quantity }),
        limits: closed({ cpu: quantity, memory: quantity }),
      }),
      affinity: closed({ enablePodAntiAffinity: { type: "boolean" }, topologyKey: { type: "string" } }),
      monitoring: closed({ enablePodMonitor: { type: "boolean" } }),
    },
    ["instances", "storage"],
  ),
);

const database = resource(
  "Database",
  closed(
    {
      cluster: localReference,
      name: { ...roleName, not: { enum: ["postgres", "template0", "template1"] } },
      owner: roleName,
      ensure: { enum: ["present", "absent"] },
      databaseReclaimPolicy: { enum: ["delete", "retain"] },
    },
    ["cluster", "name", "owner"],
  ),
);

/** The PgBouncer settings CloudNativePG's webhook accepts in a Pooler (the ones used here; others are refused). */
const PGBOUNCER_PARAMETERS = [
  "client_tls_sslmode",
  "default_pool_size",
  "max_client_conn",
  "max_db_connections",
  "reserve_pool_size",
  "query_wait_timeout",
  "server_idle_timeout",
];

const pooler = resource(
  "Pooler",
  closed(
    {
      cluster: localReference,
      instances: { type: "integer", minimum: 0 },
      type: { enum: ["rw", "ro", "r"] },
      pgbouncer: closed({
        poolMode: { enum: ["session", "transaction"] },
        parameters: {
          type: "object",
          propertyNames: { enum: PGBOUNCER_PARAMETERS },
          additionalProperties: { type: "string" },
        },
      }),
    },
    ["cluster", "pgbouncer"],
  ),
);

const scheduledBackup = resource(
  "ScheduledBackup",
  closed(
    {
      cluster: localReference,
      // Six fields: CloudNativePG's schedule starts with seconds.
      schedule: { type: "string", pattern: "^\\S+( \\S+){5}$" },
      method: { enum: ["barmanObjectStore", "volumeSnapshot", "plugin"] },
      immediate: { type: "boolean" },
      suspend: { type: "boolean" },
      backupOwnerReference: { enum: ["none", "self", "cluster"] },
      target: { enum: ["primary", "prefer-standby"] },
    },
    ["cluster", "schedule"],
  ),
);

/** "apiVersion/Kind" → its schema. */
export const CNPG_SCHEMAS: Readonly<Record<string, Schema>> = {
  [`${CNPG}/Cluster`]: cluster,
  [`${CNPG}/Database`]: database,
  [`${CNPG}/Pooler`]: pooler,
  [`${CNPG}/ScheduledBackup`]: scheduledBackup,
};
