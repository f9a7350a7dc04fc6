// RBAC of every rendering, checked beside its network flows: which pods may talk to the
// Kubernetes API and what they may do there. Nothing cluster-wide; no wildcard and no Secret in
// any rule; the only writes are the drill runner's, exactly its API calls (drill-api-calls.ts), and the
// launcher's, in a Role the suite binds to no one (people get it from their admin); a pod carries
// an API token only when its ServiceAccount is bound to a Role of the rendering.
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

export interface RbacReport {
  readonly errors: string[];
  /** Per rendering, the pods (by owner) that carry an API token. */
  readonly tokens: Map<string, string[]>;
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
  const report: RbacReport = { errors: [], tokens: new Map() };
  for (const { name, objects } of renderings) {
    const at = (o: K8sObject) => `${name}: ${o.kind} ${o.metadata.name}`;
    for (const object of objects.filter((o) => o.kind === "ClusterRole" || o.kind === "ClusterRoleBinding"))
      report.errors.push(`${at(object)}: nothing of the suite is cluster-wide`);
    for (const role of objects.filter((o) => o.kind === "Role"))
      report.errors.push(...ruleErrors(at(role), role as unknown as Role));
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
