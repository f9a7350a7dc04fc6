// The patrol component: `pnpm patrol` (the golden set run against the suite, issue 22) as a daily
// CronJob in the namespace. It runs the orchestrator's own image (its CLI is in it: no image of
// its own to build and tag), reads the golden set from a ConfigMap that `pnpm gen` writes from
// test/golden/tasks.jsonl (so no image changes when a task is added, and a rendering is the same
// bytes for the same commit), acts as three people whose keys come from a Secret, runs dry
// (never --live: a patrol moves no money), and may reach the orchestrator's gRPC port and nothing
// else (DNS from the namespace's shared egress policy).
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { CronJob } from "kubernetes-types/batch/v1.js";
import type { ConfigMap, ServiceAccount } from "kubernetes-types/core/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { API_CLIENT_LABEL, JWKS_SECRET, NAMESPACE, podSelector, serviceHost, PART_OF_LABELS } from "./cluster-names.js";
import { deploymentImageReplacement, HARDENED_CONTAINER, RUN_AS, secretFile } from "./service-objects.js";

export const PATROL = "loopguard-patrol";
/** The patrol's pods; its NetworkPolicy and the flows name them by it. */
export const PATROL_LABELS = {
  "app.kubernetes.io/name": "patrol",
  "app.kubernetes.io/component": "patrol",
  ...PART_OF_LABELS,
} as const;
/** The people the patrol acts as: requester.jwk (starts), approver.jwk (answers approvals), operator.jwk (records the run). */
export const PATROL_PEOPLE_SECRET = "loopguard-patrol-people";
export const PATROL_GOLDEN_CONFIG_MAP = "loopguard-patrol-golden-set";
export const GOLDEN_SET_FILE = "test/golden/tasks.jsonl";
const GOLDEN_KEY = "tasks.jsonl";
const GOLDEN_DIR = "/etc/loopguard/patrol-golden-set";
const PEOPLE_DIR = "/etc/loopguard/patrol";
/** Daily at 03:17 UTC: off the hour, when the suite is quiet. */
export const PATROL_SCHEDULE = "17 3 * * *";
/** The success ratio under which the run, so the Job, fails (the CLI's own default). */
export const PATROL_THRESHOLD = "0.95";
/** The golden set's tasks end within their budgets' wall clocks; 30 min bounds a hung run well before the next day's. */
const ACTIVE_DEADLINE_SECONDS = 1800;

const metadata = (name: string) => ({ name, namespace: NAMESPACE, labels: { ...PATROL_LABELS } });

/** The golden set as a ConfigMap: the file's bytes under one key (a ConfigMap holds up to 1 MiB). */
export function patrolGoldenSet(tasks: string): ConfigMap {
  if (Buffer.byteLength(tasks) > 900 * 1024)
    throw new Error(`${GOLDEN_SET_FILE} is over 900 KiB: a ConfigMap holds at most 1 MiB`);
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: metadata(PATROL_GOLDEN_CONFIG_MAP),
    data: { [GOLDEN_KEY]: tasks },
  };
}

/** The patrol's own ServiceAccount, with no token: a RoleBinding someone grants the namespace's `default` never reaches it. */
export function patrolServiceAccount(): ServiceAccount {
  return { apiVersion: "v1", kind: "ServiceAccount", metadata: metadata(PATROL), automountServiceAccountToken: false };
}

export function patrolCronJob(services: readonly ServiceSpec[]): CronJob {
  const orchestrator = services.find((s) => s.kind === "orchestrator")!;
  const jwks = secretFile(JWKS_SECRET);
  return {
    apiVersion: "batch/v1",
    kind: "CronJob",
    metadata: metadata(PATROL),
    spec: {
      schedule: PATROL_SCHEDULE,
      timeZone: "Etc/UTC",
      // One run at a time; a run missed by more than an hour (controller down) waits for the next day.
      concurrencyPolicy: "Forbid",
      startingDeadlineSeconds: 3600,
      successfulJobsHistoryLimit: 3,
      failedJobsHistoryLimit: 3,
      jobTemplate: {
        metadata: { labels: { ...PATROL_LABELS } },
        spec: {
          // A failed run is a finding (under the threshold) or the suite unreachable: re-running it would only record a second run.
          backoffLimit: 0,
          activeDeadlineSeconds: ACTIVE_DEADLINE_SECONDS,
          ttlSecondsAfterFinished: 3 * 86_400,
          template: {
            metadata: { labels: { ...PATROL_LABELS, [API_CLIENT_LABEL]: "true" } },
            spec: {
              restartPolicy: "Never",
              serviceAccountName: PATROL,
              // It talks to the orchestrator over gRPC only, never to the Kubernetes API.
              automountServiceAccountToken: false,
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
                  name: "patrol",
                  // The orchestrator's image, as its Deployment runs it: patrolImageReplacements.
                  image: `loopguard/${orchestrator.name}`,
                  imagePullPolicy: "IfNotPresent",
                  command: ["node", "/app/dist/cli/patrol.js"],
                  // Dry run: no --live, ever (money tasks are validated against the ledger, nothing commits).
                  args: [
                    "--orchestrator",
                    `${serviceHost(orchestrator.name)}:${orchestrator.port}`,
                    "--tasks",
                    `${GOLDEN_DIR}/${GOLDEN_KEY}`,
                    "--threshold",
                    PATROL_THRESHOLD,
                  ],
                  env: [
                    // The CLI reads the people's keys from <LOOPGUARD_DATA_DIR>/keys/<person>.jwk.
                    { name: "LOOPGUARD_DATA_DIR", value: PEOPLE_DIR },
                    { name: "LOOPGUARD_JWKS_FILE", value: jwks.path },
                  ],
                  resources: { requests: { cpu: "100m", memory: "128Mi" }, limits: { cpu: "500m", memory: "256Mi" } },
                  securityContext: HARDENED_CONTAINER,
                  volumeMounts: [
                    { name: PATROL_PEOPLE_SECRET, mountPath: `${PEOPLE_DIR}/keys`, readOnly: true },
                    { name: jwks.secret, mountPath: jwks.dir, readOnly: true },
                    { name: PATROL_GOLDEN_CONFIG_MAP, mountPath: GOLDEN_DIR, readOnly: true },
                  ],
                },
              ],
              volumes: [
                { name: PATROL_PEOPLE_SECRET, secret: { secretName: PATROL_PEOPLE_SECRET, defaultMode: 0o440 } },
                {
                  name: jwks.secret,
                  secret: { secretName: jwks.secret, items: [{ key: jwks.key, path: jwks.key }], defaultMode: 0o440 },
                },
                {
                  name: PATROL_GOLDEN_CONFIG_MAP,
                  configMap: { name: PATROL_GOLDEN_CONFIG_MAP, items: [{ key: GOLDEN_KEY, path: GOLDEN_KEY }] },
                },
              ],
            },
          },
        },
      },
    },
  };
}

/** The patrol may reach the orchestrator's gRPC port only; the orchestrator admits it as an API client (API_CLIENT_LABEL). */
export function patrolNetworkPolicy(services: readonly ServiceSpec[]): NetworkPolicy {
  const orchestrator = services.find((s) => s.kind === "orchestrator")!;
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: metadata("patrol"),
    spec: {
      podSelector: { matchLabels: { "app.kubernetes.io/name": PATROL_LABELS["app.kubernetes.io/name"] } },
      policyTypes: ["Ingress", "Egress"],
      egress: [
        {
          to: [{ podSelector: { matchLabels: podSelector(orchestrator) } }],
          ports: [{ protocol: "TCP", port: orchestrator.port }],
        },
      ],
    },
  };
}

/**
 * kustomize replacements: the CronJob runs the image of the orchestrator's Deployment, as the
 * overlay pinned it, also where the component is layered on an overlay (`resources: [../prod]`)
 * and so added after that overlay's `images:` ran.
 */
export function patrolImageReplacements(services: readonly ServiceSpec[]): object[] {
  const orchestrator = services.find((s) => s.kind === "orchestrator")!;
  return [
    deploymentImageReplacement(orchestrator, [
      {
        select: { kind: "CronJob", name: PATROL },
        fieldPaths: ["spec.jobTemplate.spec.template.spec.containers.[name=patrol].image"],
      },
    ]),
  ];
}
