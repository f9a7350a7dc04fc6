// The PostgreSQL connection budget of one rendering, read from its objects alone: every workload
// labelled as a PostgreSQL client holds at most its pool (<PREFIX>_STORE_POOL_SIZE) per pod, and
// an orchestrator pod one LISTEN connection more; a service's peak pods are its autoscaler's
// maxReplicas, twice that on a blue-green path (a blueGreen Rollout, or blue and green
// Deployments), plus its Deployment's surge. With the CloudNativePG Cluster rendered, the sum plus
// the Pooler's server connections, superuser_reserved_connections and the operator's headroom must
// fit max_connections; without it (a managed database), the sum is what max_connections must be
// at least. `pnpm check:k8s` prints it and fails on an overdraft.
import type { K8sObject, Rendering } from "./renderings.js";
import { POSTGRES_CLIENT_LABEL } from "./cluster-names.js";
import { COLOUR_LABEL } from "./release-objects.js";
import { OPERATOR_HEADROOM_CONNECTIONS } from "./postgres-budget.js";

const NAME_LABEL = "app.kubernetes.io/name";
const COMPONENT_LABEL = "app.kubernetes.io/component";
/** PostgreSQL's default superuser_reserved_connections, where the Cluster does not set it. */
const DEFAULT_RESERVED = 3;

export interface ServiceConnections {
  readonly service: string;
  readonly peakPods: number;
  readonly poolSize: number;
  /** LISTEN connections per pod (the orchestrator's session notifications). */
  readonly listeners: number;
}

export interface ConnectionBudget {
  readonly rendering: string;
  readonly services: readonly ServiceConnections[];
  /** Server connections the Pooler may open; 0 without one. */
  readonly pooler: number;
  readonly reserved: number;
  readonly headroom: number;
  readonly total: number;
  /** The Cluster's max_connections; undefined when the rendering has no Cluster (a database outside). */
  readonly maxConnections: number | undefined;
  readonly errors: readonly string[];
}

interface Template {
  metadata?: { labels?: Record<string, string> };
  spec?: { containers?: { env?: { name: string; value?: string }[] }[] };
}

/** The fields of the rendered objects (workloads, autoscalers, CloudNativePG resources) the budget reads. */
interface Spec {
  replicas?: number;
  template?: Template;
  workloadRef?: { name?: string };
  strategy?: { blueGreen?: unknown; rollingUpdate?: { maxSurge?: number | string } };
  scaleTargetRef?: { kind?: string; name?: string };
  maxReplicas?: number;
  cluster?: { name?: string };
  instances?: number;
  postgresql?: { parameters?: Record<string, string> };
  pgbouncer?: { poolMode?: string; parameters?: Record<string, string> };
}

type Obj = K8sObject & { spec?: Spec };

interface Workload {
  readonly object: Obj;
  readonly template: Template;
}

function workloads(objects: readonly Obj[]): Workload[] {
  const deployments = objects.filter((o) => o.kind === "Deployment");
  const rollouts = objects.filter((o) => o.kind === "Rollout");
  const referenced = new Set(rollouts.map((r) => r.spec?.workloadRef?.name));
  return [
    ...rollouts.map((r) => ({
      object: r,
      template:
        r.spec?.template ??
        deployments.find((d) => d.metadata.name === r.spec?.workloadRef?.name)?.spec?.template ??
        {},
    })),
    ...deployments
      .filter((d) => !referenced.has(d.metadata.name))
      .map((d) => ({ object: d, template: d.spec?.template ?? {} })),
  ];
}

function serviceConnections(
  service: string,
  own: readonly Workload[],
  objects: readonly Obj[],
  errors: string[],
): ServiceConnections {
  const hpaMax = (w: Workload): number | undefined =>
    objects.find(
      (o) =>
        o.kind === "HorizontalPodAutoscaler" &&
        o.spec?.scaleTargetRef?.kind === w.object.kind &&
        o.spec?.scaleTargetRef?.name === w.object.metadata.name,
    )?.spec?.maxReplicas;
  const bounds = own.map((w) => hpaMax(w) ?? w.object.spec?.replicas ?? 1);
  const blueGreen =
    own.some((w) => w.object.spec?.strategy?.blueGreen) ||
    new Set(own.map((w) => w.template.metadata?.labels?.[COLOUR_LABEL]).filter(Boolean)).size > 1;
  const surges = own.map((w) => w.object.spec?.strategy?.rollingUpdate?.maxSurge);
  const surge = Math.max(0, ...surges.map((n) => (typeof n === "number" ? n : 0)));
  // Every workload of the service (each colour) must bound its pool; the largest counts.
  const pools = own.map((w) =>
    Number(
      w.template.spec?.containers?.flatMap((c) => c.env ?? []).find((e) => e.name.endsWith("_STORE_POOL_SIZE"))?.value,
    ),
  );
  if (pools.some((n) => !Number.isInteger(n) || n < 1))
    errors.push(`${service}: no <PREFIX>_STORE_POOL_SIZE: its pool is unbounded by the deployment`);
  const poolSize = Math.max(0, ...pools.filter(Number.isInteger));
  const orchestrator = own[0]?.template.metadata?.labels?.[COMPONENT_LABEL] === "orchestrator";
  return {
    service,
    peakPods: Math.max(...bounds) * (blueGreen ? 2 : 1) + surge,
    poolSize,
    listeners: orchestrator ? 1 : 0,
  };
}

function poolerConnections(cluster: Obj, objects: readonly Obj[], errors: string[]): number {
  const databases = objects.filter(
    (o) => o.kind === "Database" && o.spec?.cluster?.name === cluster.metadata.name,
  ).length;
  let total = 0;
  for (const pooler of objects.filter((o) => o.kind === "Pooler" && o.spec?.cluster?.name === cluster.metadata.name)) {
    const { poolMode, parameters = {} } = pooler.spec?.pgbouncer ?? {};
    if (poolMode !== "session")
      errors.push(
        `Pooler ${pooler.metadata.name}: poolMode ${poolMode ?? "(default)"} breaks LISTEN and named prepared statements; use session`,
      );
    const perDatabase = Number(parameters.max_db_connections);
    if (!Number.isInteger(perDatabase) || perDatabase < 1) {
      errors.push(`Pooler ${pooler.metadata.name}: no max_db_connections, so its server connections are unbounded`);
      continue;
    }
    if (Number(parameters.default_pool_size ?? 20) > perDatabase)
      errors.push(`Pooler ${pooler.metadata.name}: default_pool_size above max_db_connections`);
    // Each database it serves, and `postgres`, where its auth_query runs.
    total += (pooler.spec?.instances ?? 1) * perDatabase * (databases + 1);
  }
  return total;
}

/** The budget of `rendering`, or null when nothing in it connects to PostgreSQL. */
export function connectionBudget(rendering: Rendering): ConnectionBudget | null {
  const objects = rendering.objects as readonly Obj[];
  const clients = workloads(objects).filter((w) => w.template.metadata?.labels?.[POSTGRES_CLIENT_LABEL] === "true");
  if (clients.length === 0) return null;
  const errors: string[] = [];
  const byService = new Map<string, Workload[]>();
  for (const w of clients) {
    const name = w.template.metadata?.labels?.[NAME_LABEL] ?? w.object.metadata.name;
    byService.set(name, [...(byService.get(name) ?? []), w]);
  }
  const services = [...byService].map(([service, own]) => serviceConnections(service, own, objects, errors));
  const cluster = objects.find((o) => o.kind === "Cluster" && o.apiVersion === "postgresql.cnpg.io/v1");
  const parameters: Record<string, string> = cluster?.spec?.postgresql?.parameters ?? {};
  const pooler = cluster ? poolerConnections(cluster, objects, errors) : 0;
  const reserved = Number(parameters.superuser_reserved_connections ?? DEFAULT_RESERVED);
  const stores = services.reduce((sum, s) => sum + s.peakPods * (s.poolSize + s.listeners), 0);
  const total = stores + pooler + reserved + OPERATOR_HEADROOM_CONNECTIONS;
  // PostgreSQL's own default where the Cluster leaves it unset.
  const maxConnections = cluster ? Number(parameters.max_connections ?? 100) : undefined;
  if (maxConnections !== undefined && total > maxConnections)
    errors.push(`${total} connections at the peak exceed max_connections ${maxConnections}`);
  return {
    rendering: rendering.name,
    services,
    pooler,
    reserved,
    headroom: OPERATOR_HEADROOM_CONNECTIONS,
    total,
    maxConnections,
    errors,
  };
}

/** One line an operator reads: the sum, its parts, and what it is held against. */
export function describeBudget(budget: ConnectionBudget): string {
  const parts = budget.services.map(
    (s) => `${s.service} ${s.peakPods} pods × (${s.poolSize}${s.listeners ? ` + ${s.listeners} LISTEN` : ""})`,
  );
  if (budget.pooler > 0) parts.push(`Pooler ${budget.pooler}`);
  parts.push(`reserved ${budget.reserved}`, `headroom ${budget.headroom}`);
  const against =
    budget.maxConnections === undefined
      ? "a database outside the cluster needs max_connections at least this"
      : `max_connections ${budget.maxConnections}: ${budget.errors.length === 0 ? "fits" : "EXCEEDED"}`;
  return `policy: connection budget of ${budget.rendering}: ${budget.total} (${parts.join(", ")}); ${against}`;
}
