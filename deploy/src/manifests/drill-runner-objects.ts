// The chaos-drills component's drill runner: the Job `pnpm drill … --k8s` runs in the namespace
// (its template, as a suspended CronJob: a Job object in the component would start a drill on
// every apply, and a Job's pod template cannot change, so a re-apply with a new image tag would
// fail), its identity and the RBAC it needs (generated from RUNNER_API_CALLS, nothing more), the
// NetworkPolicies that let it reach the orchestrator, billing, Prometheus and the Kubernetes API,
// and the Role a person running drills is bound to (LAUNCHER_API_CALLS: what the launcher's
// kubectl calls need).
import type { CronJob } from "kubernetes-types/batch/v1.js";
import type { ServiceAccount } from "kubernetes-types/core/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import type { PolicyRule, Role, RoleBinding } from "kubernetes-types/rbac/v1.js";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import {
  API_CLIENT_LABEL,
  JWKS_SECRET,
  NAMESPACE,
  PROMETHEUS_PORT,
  podSelector,
  PART_OF_LABELS,
} from "./cluster-names.js";
import { PROMETHEUS_PEER } from "./monitoring-objects.js";
import { RUN_AS, secretFile } from "./service-objects.js";
import { type ApiCall, LAUNCHER_API_CALLS, RUNNER_API_CALLS } from "./drill-api-calls.js";

export const DRILL_RUNNER = "loopguard-drill-runner";
const DRILL_RUNNER_IMAGE = "loopguard/drill-runner";
const IMAGE_CARRIER = "loopguard-drill-runner-image";
export const DRILL_LAUNCHER = "loopguard-drill-launcher";
/** The runner's pods; the NetworkPolicies name them by it. */
export const RUNNER_LABELS = {
  "app.kubernetes.io/name": "drill-runner",
  "app.kubernetes.io/component": "drill-runner",
  ...PART_OF_LABELS,
} as const;
/** The people the drill acts as: their private keys (requester.jwk, approver.jwk, operator.jwk), each bound in the cluster's JWKS. */
export const PEOPLE_SECRET = "loopguard-drill-people";
const PEOPLE_DIR = "/etc/loopguard/drill";
/** Where the runner writes its report before printing it: the pod's only writable place. */
export const RUNNER_TMP = "/tmp";
/** Kubernetes API server ports: 443 through the `kubernetes` Service, 6443 where a CNI sees the endpoint behind it. */
const API_SERVER_PORTS = [443, 6443];

const metadata = (name: string, labels: Record<string, string> = {}) => ({
  name,
  namespace: NAMESPACE,
  labels: { "app.kubernetes.io/component": "drill-runner", ...PART_OF_LABELS, ...labels },
});

/**
 * One rule per API group, resource and object named (if any), verbs in the order listed; the keys
 * in the order kustomize writes them (alphabetical), so a rendered Role compares equal.
 */
export function rulesOf(calls: readonly ApiCall[]): PolicyRule[] {
  const rules = new Map<string, PolicyRule>();
  for (const call of calls) {
    const key = `${call.group}/${call.resource}/${call.resourceName ?? ""}`;
    const rule = rules.get(key) ?? {
      apiGroups: [call.group],
      ...(call.resourceName ? { resourceNames: [call.resourceName] } : {}),
      resources: [call.resource],
      verbs: [],
    };
    rule.verbs.push(call.verb);
    rules.set(key, rule);
  }
  return [...rules.values()];
}

/** The runner's container: the arguments are the scenario's, set by the launcher on each Job. */
function runnerJobTemplate(services: readonly ServiceSpec[]): NonNullable<CronJob["spec"]>["jobTemplate"] {
  const jwks = secretFile(JWKS_SECRET);
  const catalogue = services.map((s) => ({ name: s.name, kind: s.kind, port: s.port }));
  return {
    metadata: { labels: RUNNER_LABELS },
    spec: {
      // A drill is run once: a second attempt would start its sessions again against the same ledger.
      backoffLimit: 0,
      activeDeadlineSeconds: 1800,
      ttlSecondsAfterFinished: 86_400,
      template: {
        metadata: { labels: { ...RUNNER_LABELS, [API_CLIENT_LABEL]: "true" } },
        spec: {
          restartPolicy: "Never",
          serviceAccountName: DRILL_RUNNER,
          // The one pod of the namespace that talks to the Kubernetes API (its Role: RUNNER_API_CALLS).
          automountServiceAccountToken: true,
          enableServiceLinks: false,
          securityContext: {
            runAsNonRoot: true,
            runAsUser: RUN_AS,
            runAsGroup: RUN_AS,
            fsGroup: RUN_AS,
            seccompProfile: { type: "RuntimeDefault" },
          },
          containers: [
            {
              name: "drill-runner",
              // The overlay's, through drillRunnerImageReplacements.
              image: DRILL_RUNNER_IMAGE,
              imagePullPolicy: "IfNotPresent",
              env: [
                { name: "LOOPGUARD_DRILL_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
                { name: "LOOPGUARD_DRILL_SERVICES", value: JSON.stringify(catalogue) },
                { name: "LOOPGUARD_DATA_DIR", value: PEOPLE_DIR },
                { name: "LOOPGUARD_JWKS_FILE", value: jwks.path },
              ],
              resources: { requests: { cpu: "250m", memory: "256Mi" }, limits: { cpu: "1", memory: "512Mi" } },
              securityContext: {
                readOnlyRootFilesystem: true,
                allowPrivilegeEscalation: false,
                capabilities: { drop: ["ALL"] },
              },
              volumeMounts: [
                { name: PEOPLE_SECRET, mountPath: `${PEOPLE_DIR}/keys`, readOnly: true },
                { name: jwks.secret, mountPath: jwks.dir, readOnly: true },
                { name: "tmp", mountPath: RUNNER_TMP },
              ],
            },
          ],
          volumes: [
            { name: PEOPLE_SECRET, secret: { secretName: PEOPLE_SECRET, defaultMode: 0o440 } },
            {
              name: jwks.secret,
              secret: { secretName: jwks.secret, items: [{ key: jwks.key, path: jwks.key }], defaultMode: 0o440 },
            },
            { name: "tmp", emptyDir: { sizeLimit: "64Mi" } },
          ],
        },
      },
    },
  };
}

/** The Job's template: suspended, so it never runs on a schedule; `pnpm drill … --k8s` makes a Job of it per run. */
export function drillRunnerTemplate(services: readonly ServiceSpec[]): CronJob {
  return {
    apiVersion: "batch/v1",
    kind: "CronJob",
    metadata: metadata(DRILL_RUNNER, { "app.kubernetes.io/name": "drill-runner" }),
    spec: {
      suspend: true,
      schedule: "0 0 1 1 *",
      concurrencyPolicy: "Forbid",
      jobTemplate: runnerJobTemplate(services),
    },
  };
}

export function drillRunnerRbac(): [ServiceAccount, Role, RoleBinding, Role] {
  return [
    { apiVersion: "v1", kind: "ServiceAccount", metadata: metadata(DRILL_RUNNER), automountServiceAccountToken: false },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: metadata(DRILL_RUNNER),
      rules: rulesOf(RUNNER_API_CALLS),
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: metadata(DRILL_RUNNER),
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: DRILL_RUNNER },
      subjects: [{ kind: "ServiceAccount", name: DRILL_RUNNER, namespace: NAMESPACE }],
    },
    // Bound by whoever runs game days to the people who may (`kubectl create rolebinding`).
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: metadata(DRILL_LAUNCHER),
      rules: rulesOf(LAUNCHER_API_CALLS),
    },
  ];
}

/**
 * The runner may reach the orchestrator's API and metrics (every replica), billing's API (the
 * ledger audit), Prometheus and the Kubernetes API; billing admits it. The orchestrator admits it
 * as an API client (API_CLIENT_LABEL); DNS comes from the namespace's shared egress policy.
 */
export function drillRunnerNetworkPolicies(services: readonly ServiceSpec[]): NetworkPolicy[] {
  const orchestrator = services.find((s) => s.kind === "orchestrator")!;
  // The ledger audit reads billing (a suite without it has no refunds to audit).
  const billing = services.filter((s) => s.name === "billing");
  const runner = {
    podSelector: { matchLabels: { "app.kubernetes.io/name": RUNNER_LABELS["app.kubernetes.io/name"] } },
  };
  const tcp = (...ports: number[]) => ports.map((port) => ({ protocol: "TCP", port }));
  return [
    {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: metadata("drill-runner"),
      spec: {
        podSelector: runner.podSelector,
        policyTypes: ["Ingress", "Egress"],
        egress: [
          {
            to: [{ podSelector: { matchLabels: podSelector(orchestrator) } }],
            ports: tcp(orchestrator.port, orchestrator.metricsPort),
          },
          ...billing.map((b) => ({ to: [{ podSelector: { matchLabels: podSelector(b) } }], ports: tcp(b.port) })),
          { to: [PROMETHEUS_PEER], ports: tcp(PROMETHEUS_PORT) },
          { ports: tcp(...API_SERVER_PORTS) },
        ],
      },
    },
    ...billing.map(
      (b): NetworkPolicy => ({
        apiVersion: "networking.k8s.io/v1",
        kind: "NetworkPolicy",
        metadata: metadata("billing-from-drill-runner", { "app.kubernetes.io/name": b.name }),
        spec: {
          podSelector: { matchLabels: podSelector(b) },
          policyTypes: ["Ingress"],
          ingress: [{ from: [runner], ports: tcp(b.port) }],
        },
      }),
    ),
  ];
}

/**
 * The drill runner's image as the overlays' `images:` pin it, for the chaos-drills component: an
 * inert PodTemplate in the base that kustomize keeps out of the rendering (local-config) but pins
 * with every other image. A component layered on an overlay (`resources: [../prod]`) adds its
 * CronJob after that overlay's `images:` ran; drillRunnerImageReplacements copies the pinned image.
 */
export function drillRunnerImageCarrier(): object {
  return {
    apiVersion: "v1",
    kind: "PodTemplate",
    metadata: { name: IMAGE_CARRIER, annotations: { "config.kubernetes.io/local-config": "true" } },
    template: { spec: { containers: [{ name: "drill-runner", image: DRILL_RUNNER_IMAGE }] } },
  };
}

/** kustomize replacements: the runner's CronJob runs the image the overlay pinned on drillRunnerImageCarrier. */
export function drillRunnerImageReplacements(): object[] {
  return [
    {
      source: {
        kind: "PodTemplate",
        name: IMAGE_CARRIER,
        fieldPath: "template.spec.containers.[name=drill-runner].image",
      },
      targets: [
        {
          select: { kind: "CronJob", name: DRILL_RUNNER },
          fieldPaths: ["spec.jobTemplate.spec.template.spec.containers.[name=drill-runner].image"],
        },
      ],
    },
  ];
}
