// The RBAC check pnpm check:k8s runs on every rendering: each rule it holds can fail.
import { describe, expect, it } from "vitest";
import { LAUNCHER_API_CALLS, RUNNER_API_CALLS } from "./drill-api-calls.js";
import { DRILL_LAUNCHER, DRILL_RUNNER, rulesOf } from "./drill-runner-objects.js";
import type { K8sObject, Rendering } from "./renderings.js";
import { checkRbac, SECRET_READERS, secretPaths } from "./rbac-check.js";

const role = (name: string, rules: object[]): K8sObject => ({
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "Role",
  metadata: { name },
  rules,
});
const binding = (role: string, account: string): K8sObject => ({
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "RoleBinding",
  metadata: { name: role },
  roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: role },
  subjects: [{ kind: "ServiceAccount", name: account, namespace: "loopguard" }],
});
const account = (name: string, automount = false): K8sObject => ({
  apiVersion: "v1",
  kind: "ServiceAccount",
  metadata: { name },
  automountServiceAccountToken: automount,
});
const deployment = (name: string, serviceAccountName: string, automount?: boolean): K8sObject => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name },
  spec: {
    template: {
      spec: {
        serviceAccountName,
        ...(automount === undefined ? {} : { automountServiceAccountToken: automount }),
        containers: [],
      },
    },
  },
});
const errorsOf = (...objects: K8sObject[]) => checkRbac([{ name: "r", objects } as Rendering]).errors;
const READ_PODS = { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"] };

describe("RBAC check", () => {
  it("passes a reader bound to the one pod with a token, and the runner holding exactly its calls", () => {
    expect(
      errorsOf(
        role("reader", [READ_PODS]),
        binding("reader", "reader"),
        account("reader"),
        deployment("reader", "reader", true),
        role(DRILL_RUNNER, rulesOf(RUNNER_API_CALLS)),
      ),
    ).toEqual([]);
  });

  it("refuses anything cluster-wide, a wildcard, Secrets, and writes no list names", () => {
    expect(
      errorsOf({ apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: "c" } }),
    ).toEqual(["r: ClusterRole c: nothing of the suite is cluster-wide"]);
    expect(errorsOf(role("w", [{ apiGroups: [""], resources: ["*"], verbs: ["get"] }]))[0]).toMatch(/a wildcard/);
    expect(errorsOf(role("s", [{ apiGroups: [""], resources: ["secrets"], verbs: ["get"] }]))).toEqual([
      "r: Role s: grants access to Secrets",
    ]);
    expect(errorsOf(role("x", [{ apiGroups: [""], resources: ["pods"], verbs: ["delete"] }]))[0]).toMatch(
      /writes, and is no Role whose writes are listed/,
    );
  });

  it("refuses a runner Role with one call more than it makes, and the launcher's Role bound to a ServiceAccount", () => {
    const more = [...RUNNER_API_CALLS, { group: "", resource: "pods", verb: "delete" }];
    expect(errorsOf(role(DRILL_RUNNER, rulesOf(more)))[0]).toMatch(/not exactly its API calls/);
    expect(errorsOf(binding(DRILL_LAUNCHER, "someone"))).toEqual([
      `r: RoleBinding ${DRILL_LAUNCHER}: binds ${DRILL_LAUNCHER}, which is a person's to be given`,
    ]);
  });

  it("refuses an API token in a pod whose ServiceAccount has no Role, by default or by its account", () => {
    expect(errorsOf(deployment("web", "web"))).toEqual([
      "r: Deployment web carries an API token its ServiceAccount web has no Role for",
    ]);
    expect(errorsOf(account("web", true), deployment("web", "web"))).toHaveLength(1);
    expect(errorsOf(account("web"), deployment("web", "web"))).toEqual([]);
  });

  it.each(
    (
      "pods:create pods/exec:create pods/attach:get pods/ephemeralcontainers:patch replicationcontrollers:create " +
      "deployments:create deployments:patch replicasets:create statefulsets:update daemonsets:create jobs:create cronjobs:create"
    ).split(" "),
  )("counts %s as reading every Secret of the namespace, refused in a Role not listed as such", (call) => {
    const [resource, verb] = call.split(":") as [string, string];
    expect(errorsOf(role("starter", [{ apiGroups: ["*"], resources: [resource], verbs: [verb] }]))).toContain(
      `r: Role starter: can read every Secret of the namespace through a pod it starts or enters (${resource} ${verb}), and is not listed in SECRET_READERS`,
    );
  });

  it("lists the launcher as reading the namespace's Secrets through the Jobs it creates, and refuses a listed Role that no longer can", () => {
    expect(secretPaths({ rules: rulesOf(LAUNCHER_API_CALLS) } as never)).toEqual(["jobs create"]);
    expect(Object.keys(SECRET_READERS)).toEqual([DRILL_LAUNCHER]);
    expect(SECRET_READERS[DRILL_LAUNCHER]).toMatch(/operator of the namespace/);
    const report = checkRbac([
      { name: "r", objects: [role(DRILL_LAUNCHER, rulesOf(LAUNCHER_API_CALLS))] } as Rendering,
    ]);
    expect(report.errors).toEqual([]);
    expect(report.secretReaders).toEqual(new Map([["r", [DRILL_LAUNCHER]]]));
    expect(secretPaths({ rules: [READ_PODS] } as never)).toEqual([]);
  });
});
