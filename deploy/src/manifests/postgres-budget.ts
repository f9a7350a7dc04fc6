// How many PostgreSQL connections the stateful services may hold, derived from their replica
// bounds, so that at the most pods a release and the autoscalers can run at once the sum stays
// under the database's max_connections. `pnpm gen` renders each service's share as
// <PREFIX>_STORE_POOL_SIZE (components/postgres-stores); the budget check (connection-budget-check.ts)
// recomputes the sum from the rendered objects, so a change to an HPA, the Cluster or the Pooler
// that breaks it fails `pnpm check:k8s`.
//
// The peak of a service's pods: its autoscaler's maxReplicas, twice that for a tool on a blue-green
// release path (old and new colour both scaled out until the flip and the scale-down delay), plus
// the rolling update's surge. Each pod holds at most its pool, and an orchestrator pod one more
// connection: the LISTEN for session changes. A pod's migration connection is closed before its
// pool opens, so it adds nothing to the peak.
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { maxReplicas } from "./availability-objects.js";

/** The CloudNativePG Cluster's max_connections (components/cloudnative-pg/cluster.yaml). */
export const POSTGRES_MAX_CONNECTIONS = 200;
/** superuser_reserved_connections, set explicitly in the Cluster so the budget reads it. */
export const SUPERUSER_RESERVED_CONNECTIONS = 3;
/**
 * Left for the operator and whoever is on call: the instance manager's own connections, the
 * metrics exporter, a base backup, a psql in an incident.
 */
export const OPERATOR_HEADROOM_CONNECTIONS = 10;
/**
 * The Pooler (components/cloudnative-pg/pooler.yaml): its instances, and max_db_connections, the
 * server connections one instance opens per database. It serves the stores' databases and
 * `postgres` (its auth_dbname, where auth_query runs).
 */
export const POOLER = { instances: 2, maxDbConnections: 2, defaultPoolSize: 2, maxClientConnections: 100 } as const;
/** A tool call is one statement or one short transaction: a few connections per replica serve it. */
export const TOOL_POOL_SIZE = 3;
/** The Deployments' rolling update surge (service-objects.ts). */
export const ROLLING_SURGE = 1;

/** Pods of `spec` that may run at once: both colours of a tool scaled out during a release, plus the surge. */
export function peakPods(spec: ServiceSpec): number {
  return maxReplicas(spec) * (spec.kind === "tool" ? 2 : 1) + ROLLING_SURGE;
}

/** Server connections the Pooler may open at most: per instance, max_db_connections for each database it serves. */
export function poolerServerConnections(databases: number): number {
  return POOLER.instances * POOLER.maxDbConnections * (databases + 1);
}

/**
 * Each stateful service's pool size: the tools get TOOL_POOL_SIZE, the orchestrator what remains
 * of max_connections after the reserved, the headroom, the Pooler, the tools' peak and one LISTEN
 * per orchestrator pod, shared over its peak pods.
 */
export function storePoolSizes(stateful: readonly ServiceSpec[]): Record<string, number> {
  const tools = stateful.filter((s) => s.kind !== "orchestrator");
  const orchestrators = stateful.filter((s) => s.kind === "orchestrator");
  const fixed =
    SUPERUSER_RESERVED_CONNECTIONS + OPERATOR_HEADROOM_CONNECTIONS + poolerServerConnections(stateful.length);
  const toolConnections = tools.reduce((sum, s) => sum + peakPods(s) * TOOL_POOL_SIZE, 0);
  const orchestratorPods = orchestrators.reduce((sum, s) => sum + peakPods(s), 0);
  const left = POSTGRES_MAX_CONNECTIONS - fixed - toolConnections - orchestratorPods;
  const orchestratorPool = orchestratorPods === 0 ? 0 : Math.floor(left / orchestratorPods);
  if (orchestrators.length > 0 && orchestratorPool < 2) {
    throw new Error(
      `max_connections ${POSTGRES_MAX_CONNECTIONS} leaves the orchestrator ${orchestratorPool} connections per pod at its peak: raise it or lower the replica bounds`,
    );
  }
  return Object.fromEntries(
    stateful.map((s) => [s.name, s.kind === "orchestrator" ? orchestratorPool : TOOL_POOL_SIZE]),
  );
}
