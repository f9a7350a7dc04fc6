// RBAC of every rendering, checked beside its network flows: which pods may talk to the
// Kubernetes API and what they may do there. Nothing cluster-wide; no wildcard and no Secret in
// any rule; the only writes are the drill runner's, exactly its API calls (drill-api-calls.ts), and the
// launcher's, in a Role the suite binds to no one (people get it from their admin); a Role that can
// start or enter a pod reads every Secret of the namespace, and only those of SECRET_READERS may; a
// pod carries an API token only when its ServiceAccount is bound to a Role of the rendering.
import type { PolicyRule, Role, RoleBinding } from "kubernetes-types/rbac/v1.js";
import type { PodSpec, ServiceAccount } from "kubernetes-types/core/v1.js";
import { LAUNCHER_API_CALLS, RUNNER_API_CALLS } from "./drill-api-calls.js";
import { DRILL_LAUNCHER, DRILL_RUNNER, rulesOf } from "./drill-runner-objects.js";
import type { K8sObject, Rendering } from "./renderings.js";

const READ_VERBS = new Set(["get", "list", "watch"]);
/** Roles that may write, with the exact rules they must hold. */
const WRITERS: Readonly<Record<string, PolicyRule[]>> = {
  [DRILL_RUNNER]: rulesOf(RUNNER_API_CALLS),
  [DRILL_LAUNCHER]: rulesOf(LAUNCHER_API_CALLS),
};
/** Writers no ServiceAccount of the suite may be bound to. */
const UNBOUND = new Set([DRILL_LAUNCHER]);

const WORKLOAD_WRITES = ["create", "update", "patch"];
/**
 * Who may create a pod, directly or through a controller, or change a controller's pod template,
 * may mount any Secret of the namespace and run as any ServiceAccount there; who may exec, attach
 * or add an ephemeral container reads what a running pod mounts. Each is Secret access.
 */
const SECRET_VIA: Readonly<Record<string, readonly string[]>> = {
  pods: ["create"],
  "pods/exec": ["create", "get"],
  "pods/attach": ["create", "get"],
  "pods/ephemeralcontainers": ["update", "patch"],
  ...Object.fromEntries(
    ["replicationcontrollers", "deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs"].map(
      (resource) => [resource, WORKLOAD_WRITES],
    ),
  ),
};

/** The Roles that may read the namespace's Secrets through a pod they start, and why they must. */
export const SECRET_READERS: Readonly<Record<string, string>> = {
  [DRILL_LAUNCHER]:
    "`pnpm drill --k8s` creates the drill's Job (jobs create); RBAC cannot hold that Job to the CronJob's template, " +
    "so its holder can run any pod spec, mounting any Secret, as any ServiceAccount of the namespace: " +
    "bind it only to people trusted like an operator of the namespace",
};

/** How a Role reaches the namespace's Secrets through pods (e.g. "jobs create"); empty when it cannot. */
export function secretPaths(role: Pick<Role, "rules">): string[] {
  return (role.rules ?? []).flatMap((rule) =>
    (rule.resources ?? []).flatMap((resource) =>
      rule.verbs.filter((verb) => SECRET_VIA[resource]?.includes(verb)).map((verb) => `${resource} ${verb}`),
    ),
  );
}

export interface RbacReport {
  readonly errors: string[];
  /** Per rendering, the pods (by owner) that carry an API token. */
  readonly tokens: Map<string, string[]>;
  /** Per rendering, the Roles of SECRET_READERS it holds. */
  readonly secretReaders: Map<string, string[]>;
}

/** The pod template of a workload object, with the object's name; undefined for anything that runs no pods. */
function podOf(object: K8sObject): { owner: string; pod: PodSpec } | undefined {
  const spec = object.spec as
    | { template?: { spec?: PodSpec }; jobTemplate?: { spec?: { template?: { spec?: PodSpec } } } }
    | undefined;
  const pod = spec?.template?.spec ?? spec?.jobTemplate?.spec?.template?.spec;
  return pod && object.kind !== "AnalysisTemplate"
    ? { owner: `${object.kind} ${object.metadata.name}`, pod }
    : undefined;
}

function ruleErrors(where: string, role: Role): string[] {
  const rules = role.rules ?? [];
  const errors = rules.flatMap((rule) => [
    ...([...(rule.apiGroups ?? []), ...(rule.resources ?? []), ...rule.verbs].includes("*")
      ? [`${where}: a wildcard in ${JSON.stringify(rule)}`]
      : []),
    ...((rule.resources ?? []).includes("secrets") ? [`${where}: grants access to Secrets`] : []),
  ]);
  const paths = secretPaths(role);
  const listed = role.metadata!.name! in SECRET_READERS;
  if (paths.length > 0 && !listed)
    errors.push(
      `${where}: can read every Secret of the namespace through a pod it starts or enters (${paths.join(", ")}), and is not listed in SECRET_READERS`,
    );
  if (paths.length === 0 && listed) errors.push(`${where}: listed in SECRET_READERS, but starts no pod: drop it there`);
  const writer = WRITERS[role.metadata!.name!];
  if (writer) {
    if (JSON.stringify(rules) !== JSON.stringify(writer))
      errors.push(`${where}: grants ${JSON.stringify(rules)}, not exactly its API calls ${JSON.stringify(writer)}`);
  } else if (rules.some((rule) => rule.verbs.some((verb) => !READ_VERBS.has(verb)))) {
    errors.push(`${where}: writes, and is no Role whose writes are listed (manifests/drill-api-calls.ts)`);
  }
  return errors;
}

export function checkRbac(renderings: readonly Rendering[]): RbacReport {
  const report: RbacReport = { errors: [], tokens: new Map(), secretReaders: new Map() };
  for (const { name, objects } of renderings) {
    const at = (o: K8sObject) => `${name}: ${o.kind} ${o.metadata.name}`;
    for (const object of objects.filter((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding"))
      report.errors.push(`${at(object)}: nothing of the suite is cluster-wide`);
    const roles = objects.filter((o) => o.kind === "Role");
    for (const role of roles) report.errors.push(...ruleErrors(at(role), role as unknown as Role));
    report.secretReaders.set(
      name,
      roles.map((r) => r.metadata.name).filter((n) => n in SECRET_READERS),
    );
    const bound = new Set<string>();
    for (const object of objects.filter((o) => o.kind === "RoleBinding")) {
      const binding = object as unknown as RoleBinding;
      if (UNBOUND.has(binding.roleRef.name))
        report.errors.push(`${at(object)}: binds ${binding.roleRef.name}, which is a person's to be given`);
      for (const subject of binding.subjects ?? []) if (subject.kind === "ServiceAccount") bound.add(subject.name);
    }
    const accounts = new Map(
      objects.filter((o) => o.kind === "ServiceAccount").map((o) => [o.metadata.name, o as unknown as ServiceAccount]),
    );
    const tokens: string[] = [];
    for (const { owner, pod } of objects.flatMap((o) => podOf(o) ?? [])) {
      const account = pod.serviceAccountName ?? "default";
      const mounted = pod.automountServiceAccountToken ?? accounts.get(account)?.automountServiceAccountToken ?? true;
      if (!mounted) continue;
      tokens.push(owner);
      if (!bound.has(account))
        report.errors.push(`${name}: ${owner} carries an API token its ServiceAccount ${account} has no Role for`);
    }
    report.tokens.set(name, tokens);
  }
  return report;
}
