// The release gate's smoke calls on Kubernetes: a Job that runs `loopguard-smoke` from the tool's
// own image against a Service of the tool (`<tool>-preview` before the flip, `<tool>` after it),
// signed with a probe key of its own (Secret loopguard-smoke-key: a `pnpm keys new --role probe`
// key, read-only scopes; never the orchestrator's), and the NetworkPolicies that let those pods,
// and only those, reach the tool's gRPC port. Argo Rollouts runs the Job as a metric of the
// AnalysisTemplate; the kubectl path (release/k8s.ts) creates the same Job itself. The schedule
// both follow is GATE_SCHEDULE.
import { type SmokeCall, smokeCount } from "@loopguard/tool-sdk";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { JobSpec } from "kubernetes-types/batch/v1.js";
import type { ServiceAccount } from "kubernetes-types/core/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import { NAMESPACE, podSelector, PART_OF_LABELS } from "./cluster-names.js";
import { RUN_AS, secretFile } from "./service-objects.js";

/** Pods of a smoke Job carry this label, valued with the tool they call; the tool's NetworkPolicy admits them. */
export const SMOKE_LABEL = "loopguard/smoke-check";
export const SMOKE_SERVICE_ACCOUNT = "loopguard-smoke";
/** The probe key's private JWK (created with `kubectl create secret`, never rendered from git). */
export const SMOKE_KEY_SECRET = "loopguard-smoke-key/smoke-key.jwk";
/** Where the tool-sdk's CLI lies in every service image (pnpm deploy of the service links its tool-sdk). */
const SMOKE_CLI = "/app/node_modules/@loopguard/tool-sdk/dist/cli/smoke.js";

/**
 * When the gate measures: the smoke calls spread over `spreadSeconds` (several scrapes see them
 * arrive), the SLO queries first after `initialDelaySeconds` (the calls made and scraped), then
 * `count` times `intervalSeconds` apart; one failed measurement of `count` is forgiven (a scrape
 * that lags, a GC pause in a p95), two are not. A measurement Prometheus cannot answer is not one
 * of the `count`: it is taken again `errorRetrySeconds` later (Argo's own retry interval, not a
 * field of the template), so a gate passes only on `count` answers, at least `count` −
 * `failureLimit` of them within the SLO; two in a row it cannot answer are an error, which aborts.
 */
export const GATE_SCHEDULE = {
  spreadSeconds: 60,
  initialDelaySeconds: 75,
  intervalSeconds: 30,
  count: 3,
  failureLimit: 1,
  consecutiveErrorLimit: 1,
  errorRetrySeconds: 10,
} as const;

/** The Job that sends the tool's smoke calls to `target` (host:port), from `image`; its type fits both a batch/v1 Job and Argo's job metric. */
export function smokeJobSpec(spec: ServiceSpec, call: SmokeCall, target: string, image = `loopguard/${spec.name}`) {
  const key = secretFile(SMOKE_KEY_SECRET);
  return {
    backoffLimit: 0,
    activeDeadlineSeconds: GATE_SCHEDULE.spreadSeconds + 120,
    template: {
      metadata: {
        labels: {
          [SMOKE_LABEL]: spec.name,
          "app.kubernetes.io/component": "smoke-check",
          ...PART_OF_LABELS,
        },
      },
      spec: {
        restartPolicy: "Never",
        serviceAccountName: SMOKE_SERVICE_ACCOUNT,
        automountServiceAccountToken: false,
        enableServiceLinks: false,
        securityContext: {
          runAsNonRoot: true,
          runAsUser: RUN_AS,
          runAsGroup: RUN_AS,
          seccompProfile: { type: "RuntimeDefault" },
        },
        containers: [
          {
            name: "smoke",
            image,
            imagePullPolicy: "IfNotPresent",
            command: ["node", SMOKE_CLI],
            args: [
              "--tool",
              spec.name,
              "--target",
              target,
              "--count",
              String(smokeCount(call)),
              "--over",
              String(GATE_SCHEDULE.spreadSeconds),
            ],
            env: [{ name: "LOOPGUARD_SMOKE_KEY_FILE", value: key.path }],
            resources: { requests: { cpu: "50m", memory: "64Mi" }, limits: { cpu: "500m", memory: "128Mi" } },
            securityContext: {
              readOnlyRootFilesystem: true,
              allowPrivilegeEscalation: false,
              capabilities: { drop: ["ALL"] },
            },
            volumeMounts: [{ name: key.secret, mountPath: key.dir, readOnly: true }],
          },
        ],
        volumes: [
          {
            name: key.secret,
            secret: { secretName: key.secret, items: [{ key: key.key, path: key.key }], defaultMode: 0o440 },
          },
        ],
      },
    },
  } satisfies JobSpec;
}

export function smokeServiceAccount(): ServiceAccount {
  return {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: {
      name: SMOKE_SERVICE_ACCOUNT,
      namespace: NAMESPACE,
      labels: { "app.kubernetes.io/component": "smoke-check", "app.kubernetes.io/part-of": "loopguard" },
    },
    automountServiceAccountToken: false,
  };
}

/** The tool admits its smoke pods on its gRPC port; those pods may reach that port and nothing else. */
export function smokeNetworkPolicies(spec: ServiceSpec): NetworkPolicy[] {
  const smokePods = { matchLabels: { [SMOKE_LABEL]: spec.name } };
  const grpc = [{ protocol: "TCP", port: spec.port }];
  const metadata = (name: string) => ({
    name,
    namespace: NAMESPACE,
    labels: { "app.kubernetes.io/name": spec.name, "app.kubernetes.io/part-of": "loopguard" },
  });
  return [
    {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: metadata(`${spec.name}-from-smoke-checks`),
      spec: {
        podSelector: { matchLabels: podSelector(spec) },
        policyTypes: ["Ingress"],
        ingress: [{ from: [{ podSelector: smokePods }], ports: grpc }],
      },
    },
    {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: metadata(`${spec.name}-smoke-checks`),
      spec: {
        podSelector: smokePods,
        policyTypes: ["Egress"],
        egress: [{ to: [{ podSelector: { matchLabels: podSelector(spec) } }], ports: grpc }],
      },
    },
  ];
}
