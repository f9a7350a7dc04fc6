// The database as a platform team reads it in the rendered prod objects with the cloudnative-pg
// component and a blue-green release path: the connection budget holds at the peak (and the
// check fails when an autoscaler, the Pooler or a pool would overdraw it), each stateful service
// has its own role and database, verifies the server with the operator's CA, seeds no demo data,
// and the Cluster is backed up; the CloudNativePG schemas refuse what the operator would.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import { beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, type Rendering, renderOnProd, validateRenderings } from "../src/manifests/renderings.js";
import { connectionBudget } from "../src/manifests/connection-budget-check.js";
import { COMPONENTS_DIR, OVERLAYS_DIR } from "../src/manifests/generated-components.js";
import { POSTGRES_CA_FILE, POSTGRES_CA_SECRET } from "../src/manifests/store-objects.js";
import { storePoolSizes } from "../src/manifests/postgres-budget.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const stateful = discoverServices(join(root, "services")).filter((s) => s.stateful);
type Obj = K8sObject & { spec: Record<string, any> };

let rendering: Rendering;
beforeAll(() => {
  rendering = renderOnProd(join(root, OVERLAYS_DIR), join(root, COMPONENTS_DIR), [
    "plain-blue-green",
    "cloudnative-pg",
  ]);
}, 60_000);

const objects = () => rendering.objects as Obj[];
const one = (kind: string, name?: string) =>
  objects().find((o) => o.kind === kind && (name === undefined || o.metadata.name === name))!;
/** The rendering with `change` applied to a copy of one object. */
function changed(kind: string, name: string, change: (o: Obj) => void): Rendering {
  const copyOf = (o: Obj): Obj => {
    const copy = structuredClone(o);
    change(copy);
    return copy;
  };
  return {
    name: "changed",
    objects: objects().map((o) => (o.kind === kind && o.metadata.name === name ? copyOf(o) : o)),
  };
}

describe("connection budget", () => {
  it("fits max_connections with both colours of every tool at their autoscalers' maximum, one LISTEN per orchestrator pod and the Pooler", () => {
    const budget = connectionBudget(rendering)!;
    expect(budget.errors).toEqual([]);
    expect(budget.maxConnections).toBe(200);
    const pools = storePoolSizes(stateful);
    for (const spec of stateful) {
      const service = budget.services.find((s) => s.service === spec.name)!;
      expect(service.poolSize, `${spec.name}: the pool size pnpm gen derived`).toBe(pools[spec.name]);
      // Blue-green tools: 2 × 10 replicas + the surge; the orchestrator: 6 + the surge.
      expect(service.peakPods).toBe(spec.kind === "tool" ? 21 : 7);
      expect(service.listeners).toBe(spec.kind === "orchestrator" ? 1 : 0);
    }
    expect(budget.pooler).toBe(2 * 2 * (stateful.length + 1));
    expect(budget.total).toBeLessThanOrEqual(200);
  });

  it("fails when an autoscaler may add more pods than the budget has connections for", () => {
    const budget = connectionBudget(changed("HorizontalPodAutoscaler", "billing", (h) => (h.spec.maxReplicas = 20)))!;
    expect(budget.errors).toEqual([expect.stringMatching(/^\d+ connections at the peak exceed max_connections 200$/)]);
  });

  it("fails when a pool is not bounded, or the Pooler is in transaction mode or unbounded", () => {
    const withoutPool = (d: Obj) => {
      const container = d.spec.template.spec.containers[0];
      container.env = container.env.filter((e: { name: string }) => e.name !== "RISK_STORE_POOL_SIZE");
    };
    expect(connectionBudget(changed("Deployment", "risk-green", withoutPool))!.errors).toContain(
      "risk: no <PREFIX>_STORE_POOL_SIZE: its pool is unbounded by the deployment",
    );
    const transaction = changed(
      "Pooler",
      "loopguard-postgres-pooler",
      (p) => (p.spec.pgbouncer.poolMode = "transaction"),
    );
    expect(connectionBudget(transaction)!.errors.join("\n")).toMatch(
      /poolMode transaction breaks LISTEN and named prepared statements/,
    );
    const unbounded = changed(
      "Pooler",
      "loopguard-postgres-pooler",
      (p) => delete p.spec.pgbouncer.parameters.max_db_connections,
    );
    expect(connectionBudget(unbounded)!.errors.join("\n")).toMatch(
      /no max_db_connections, so its server connections are unbounded/,
    );
  });
});

describe("stateful services on the CloudNativePG cluster", () => {
  it("each has its own login role with a password Secret and its own database, named loopguard_<service>", () => {
    const cluster = one("Cluster", "loopguard-postgres");
    for (const spec of stateful) {
      const role = `loopguard_${spec.name}`;
      expect(cluster.spec.managed.roles).toContainEqual({
        name: role,
        ensure: "present",
        login: true,
        passwordSecret: { name: `loopguard-${spec.name}-db` },
      });
      const database = objects().find((o) => o.kind === "Database" && o.spec.name === role);
      expect(database?.spec, `Database ${role}`).toMatchObject({
        cluster: { name: "loopguard-postgres" },
        owner: role,
        ensure: "present",
        databaseReclaimPolicy: "retain",
      });
    }
  });

  it("mounts only ca.crt of the operator's CA Secret where sslrootcert points, in every colour, and seeds no demo data", () => {
    const pods = objects().filter(
      (o) => o.kind === "Deployment" && o.spec.template.metadata.labels["loopguard/postgres-client"] === "true",
    );
    expect(new Set(pods.map((d) => d.spec.template.metadata.labels["app.kubernetes.io/name"]))).toEqual(
      new Set(stateful.map((s) => s.name)),
    );
    for (const d of pods) {
      const pod = d.spec.template.spec;
      expect(pod.volumes).toContainEqual({
        name: POSTGRES_CA_SECRET,
        secret: { secretName: "loopguard-postgres-ca", items: [{ key: "ca.crt", path: "ca.crt" }], defaultMode: 0o440 },
      });
      const mount = pod.containers[0].volumeMounts.find((m: { name: string }) => m.name === POSTGRES_CA_SECRET);
      expect(`${mount.mountPath}/ca.crt`).toBe(POSTGRES_CA_FILE);
      const env = Object.fromEntries(
        pod.containers[0].env.map((e: { name: string; value?: string }) => [e.name, e.value]),
      );
      if (d.metadata.name.startsWith("billing")) expect(env.BILLING_SEED_DEMO).toBe("false");
      if (d.metadata.name.startsWith("risk")) expect(env.RISK_SEED_DEMO).toBe("false");
    }
  });

  it("serves the Pooler's Service name in the server certificate, so its clients can verify-full too", () => {
    const names: string[] = one("Cluster", "loopguard-postgres").spec.certificates.serverAltDNSNames;
    expect(names).toContain("loopguard-postgres-pooler.loopguard.svc.cluster.local");
    expect(one("Pooler", "loopguard-postgres-pooler").spec.pgbouncer.parameters.client_tls_sslmode).toBe("require");
  });

  it("archives WAL and takes scheduled base backups to an object store whose keys are a Secret, with a retention policy", () => {
    const { backup } = one("Cluster", "loopguard-postgres").spec;
    expect(backup.retentionPolicy).toMatch(/^[1-9][0-9]*[dwm]$/);
    expect(backup.barmanObjectStore.s3Credentials.accessKeyId.name).toBe("loopguard-postgres-backup");
    expect(backup.barmanObjectStore.wal).toBeDefined();
    expect(one("ScheduledBackup").spec).toMatchObject({
      cluster: { name: "loopguard-postgres" },
      method: "barmanObjectStore",
      immediate: true,
    });
  });
});

describe("CloudNativePG schemas", () => {
  it("refuse what the operator's CRDs or webhook would", () => {
    const broken = (kind: string, name: string, change: (o: Obj) => void): K8sObject => {
      const copy = structuredClone(one(kind, name));
      change(copy);
      return copy;
    };
    const errors = validateRenderings([
      {
        name: "broken",
        objects: [
          broken("Pooler", "loopguard-postgres-pooler", (p) => (p.spec.pgbouncer.poolMode = "statement")),
          broken("Pooler", "loopguard-postgres-pooler", (p) => (p.spec.pgbouncer.parameters.listen_port = "6432")),
          broken("ScheduledBackup", "loopguard-postgres-nightly", (b) => (b.spec.schedule = "0 3 * * *")),
          broken("Database", "loopguard-billing", (d) => (d.spec.name = "postgres")),
          broken("Cluster", "loopguard-postgres", (c) => (c.spec.backup.retentionPolicy = "30 days")),
          broken(
            "Cluster",
            "loopguard-postgres",
            (c) => (c.spec.managed.roles[0].passwordSecrett = c.spec.managed.roles[0].passwordSecret),
          ),
        ],
      },
    ]).map((e) => e.message);
    expect(errors).toEqual([
      "/spec/pgbouncer/poolMode must be equal to one of the allowed values",
      "/spec/pgbouncer/parameters must be equal to one of the allowed values",
      "/spec/pgbouncer/parameters property name must be valid",
      '/spec/schedule must match pattern "^\\S+( \\S+){5}$"',
      "/spec/name must NOT be valid",
      '/spec/backup/retentionPolicy must match pattern "^[1-9][0-9]*[dwm]$"',
      "/spec/managed/roles/0 must NOT have additional properties (passwordSecrett)",
    ]);
  });
});
