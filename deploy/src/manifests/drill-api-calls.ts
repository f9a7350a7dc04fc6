// The Kubernetes API calls of a drill on a cluster, as data: what the runner's Job makes with its
// ServiceAccount (cluster-api.ts), and what the person's kubectl makes to launch and follow it
// (k8s-launch.ts). The chaos-drills component's Roles are generated from these lists, and the
// tests hold the real requests and the shipped Roles to them.

export interface ApiCall {
  /** "" for the core API. */
  readonly group: string;
  readonly resource: string;
  readonly verb: string;
  /** The one object the call may touch; RBAC cannot name one for a create or a list. */
  readonly resourceName?: string;
}

/** The one Lease (coordination.k8s.io) a drill on a cluster holds while it runs: one drill at a time. */
export const DRILL_LEASE = "loopguard-drill";

/** Every Kubernetes API call the in-cluster runner makes, and nothing else. */
export const RUNNER_API_CALLS: readonly ApiCall[] = [
  { group: "", resource: "pods", verb: "list" },
  { group: "discovery.k8s.io", resource: "endpointslices", verb: "list" },
  { group: "chaos-mesh.org", resource: "podchaos", verb: "create" },
  // A kill's status: which pods Chaos Mesh killed (k8s.ts).
  { group: "chaos-mesh.org", resource: "podchaos", verb: "get" },
  { group: "chaos-mesh.org", resource: "podchaos", verb: "delete" },
  // One drill at a time: the namespace's drill Lease, taken, renewed and let go (drill-lease.ts).
  { group: "coordination.k8s.io", resource: "leases", verb: "create" },
  { group: "coordination.k8s.io", resource: "leases", verb: "get", resourceName: DRILL_LEASE },
  { group: "coordination.k8s.io", resource: "leases", verb: "update", resourceName: DRILL_LEASE },
  { group: "coordination.k8s.io", resource: "leases", verb: "delete", resourceName: DRILL_LEASE },
];

/** The kubectl calls of `pnpm drill … --k8s` on the person's own credentials: read the drills' Lease and the template, create and follow the Job, delete it on Ctrl-C. */
export const LAUNCHER_API_CALLS: readonly ApiCall[] = [
  { group: "batch", resource: "cronjobs", verb: "get" },
  { group: "batch", resource: "jobs", verb: "create" },
  { group: "batch", resource: "jobs", verb: "get" },
  { group: "batch", resource: "jobs", verb: "delete" },
  // `kubectl logs -f job/…` finds the Job's pod by its selector, waits for it to run, then streams its log.
  { group: "", resource: "pods", verb: "get" },
  { group: "", resource: "pods", verb: "list" },
  { group: "", resource: "pods", verb: "watch" },
  { group: "", resource: "pods/log", verb: "get" },
  // Refuses at once while another drill holds the cluster (drill-lease.ts).
  { group: "coordination.k8s.io", resource: "leases", verb: "get", resourceName: DRILL_LEASE },
];
