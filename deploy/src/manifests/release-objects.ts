// The objects of the two blue-green paths per tool, as kustomize components on top of the
// services' base objects (service-objects.ts):
// - argo-rollouts: a Rollout that takes its pod template from the tool's Deployment
//   (`workloadRef`, so every other component's patches of that Deployment still apply) with the
//   blueGreen strategy: the tool's headless Service is the active Service, a
//   `<tool>-preview` Service the preview, and an AnalysisTemplate — the tool's smoke calls as a
//   Job through the preview (then the active) Service, and the release gate's SLO queries on the
//   new ReplicaSet's pods — gates the promotion and judges the new pods after it (a failure
//   aborts: Argo switches back to the old pods, kept for scaleDownDelaySeconds);
// - plain-blue-green: two Deployments, `<tool>-blue` (the base Deployment, renamed) and
//   `<tool>-green` (a copy of blue's pod template, made by kustomize `replacements` so it holds
//   whatever the other components patched in), labelled `version: blue|green`; the tool's Service
//   selects one colour, `<tool>-preview` the other, and `pnpm release` flips them.
// Both scrape every pod through a `<tool>-metrics` Service no release touches (old and new pods
// measured alike, told apart by label), and patch the autoscaler and ServiceMonitor of the
// high-availability and monitoring components (on an overlay that has those, as on prod).
import type { IAnalysisTemplate } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/AnalysisTemplate";
import type { IRollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import type { ServiceSpec, SmokeCall } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { Service } from "kubernetes-types/core/v1.js";
import { appLabels, NAMESPACE, PROMETHEUS_ADDRESS, podSelector, serviceHost } from "./cluster-names.js";
import { deployment, deploymentImageReplacement, headlessService } from "./service-objects.js";
import { GATE_SCHEDULE, SMOKE_LABEL, smokeJobSpec } from "./smoke-objects.js";
import { GATE_PASSES, gateQueries } from "./gate-queries.js";
import type { MethodSlo } from "./slo-rules.js";

export const COLOUR_LABEL = "version";
/** Plain path: one release's pods (apart from the colour's previous pods), as series label RELEASE_SERIES_LABEL. */
export const RELEASE_LABEL = "loopguard/release";
export const RELEASE_SERIES_LABEL = "loopguard_release";
export const COLOURS = ["blue", "green"] as const;
export type Colour = (typeof COLOURS)[number];
/** The label Argo Rollouts gives each ReplicaSet's pods; prometheus-operator turns it into this series label. */
export const ARGO_HASH_LABEL = "rollouts-pod-template-hash";
export const ARGO_HASH_SERIES_LABEL = "rollouts_pod_template_hash";
/** Marks the one Service per tool the ServiceMonitor scrapes when a release path is deployed. */
export const METRICS_SERVICE_LABEL = "loopguard/metrics";
/**
 * How long the old pods stay up after the flip: a client leaves them once its connection ages out (30 s
 * ±10 %), it resolves the name again (up to 30 s) and its pool closes the unused connection (10 s);
 * measured locally: 11–34 s (docs/performance.md). Then the preStop and the drain.
 */
export const SCALE_DOWN_DELAY_SECONDS = 90;
const SMOKE_METRIC = "smoke-calls";

export function previewServiceName(tool: string): string {
  return `${tool}-preview`;
}

export function colourDeploymentName(tool: string, colour: Colour): string {
  return `${tool}-${colour}`;
}

export function analysisTemplateName(tool: string): string {
  return `${tool}-slo`;
}

/** kustomize patch target: every Deployment of the service, whatever its colour or name. */
export function workloadTarget(spec: ServiceSpec, kind = "Deployment"): { kind: string; labelSelector: string } {
  return { kind, labelSelector: `app.kubernetes.io/name=${spec.name}` };
}

function renamed(service: Service, name: string, selector: Record<string, string>): Service {
  return { ...service, metadata: { ...service.metadata, name }, spec: { ...service.spec, selector } };
}

/** The tool's second headless Service: the pods a release is about to switch to (Argo's previewService, the idle colour). */
export function previewService(spec: ServiceSpec, selector: Record<string, string> = podSelector(spec)): Service {
  return renamed(headlessService(spec), previewServiceName(spec.name), selector);
}

/** Every pod of the tool, whichever Service selects it: what the ServiceMonitor scrapes once the release paths are in. */
export function metricsService(spec: ServiceSpec): Service {
  const service = headlessService(spec);
  return {
    ...service,
    metadata: {
      ...service.metadata,
      name: `${spec.name}-metrics`,
      labels: { ...service.metadata!.labels, [METRICS_SERVICE_LABEL]: "all-pods" },
    },
    spec: { ...service.spec, ports: service.spec!.ports!.filter((p) => p.name === "http") },
  };
}

/**
 * Points the tool's ServiceMonitor at its metrics Service, keeps the job named after the tool
 * (the Down alert watches it) and copies `podLabels` onto the series.
 */
export function serviceMonitorPatch(spec: ServiceSpec, podLabels: readonly string[]): object {
  return {
    apiVersion: "monitoring.coreos.com/v1",
    kind: "ServiceMonitor",
    metadata: { name: spec.name, namespace: NAMESPACE },
    spec: {
      selector: { matchLabels: { [METRICS_SERVICE_LABEL]: "all-pods" } },
      jobLabel: "app.kubernetes.io/name",
      podTargetLabels: podLabels,
    },
  };
}

/**
 * The release gate of one ReplicaSet's pods (`pod-template-hash`; Argo gives the new one as
 * `Latest`, before promotion and after): the tool's smoke calls, sent by a Job through
 * `smoke-target` (the preview Service, then the active one), and the gate queries on those pods
 * (gate-queries.ts) on GATE_SCHEDULE. A smoke Job that fails, or a query whose answer is empty, NaN
 * or above target in more than failureLimit measurements, fails the analysis: Argo aborts.
 */
export function analysisTemplate(spec: ServiceSpec, slos: readonly MethodSlo[], call: SmokeCall): IAnalysisTemplate {
  const s = GATE_SCHEDULE;
  const measured = gateQueries(slos, { [ARGO_HASH_SERIES_LABEL]: "{{args.pod-template-hash}}" }).map(
    ({ kind, query }) => ({
      name: kind,
      initialDelay: `${s.initialDelaySeconds}s`,
      interval: `${s.intervalSeconds}s`,
      count: s.count,
      failureLimit: s.failureLimit,
      consecutiveErrorLimit: s.consecutiveErrorLimit,
      successCondition: GATE_PASSES,
      provider: { prometheus: { address: "{{args.prometheus-address}}", query } },
    }),
  );
  return {
    apiVersion: "argoproj.io/v1alpha1",
    kind: "AnalysisTemplate",
    metadata: { name: analysisTemplateName(spec.name), namespace: NAMESPACE, labels: appLabels(spec) },
    spec: {
      args: [
        { name: "pod-template-hash" },
        { name: "smoke-target" },
        { name: "prometheus-address", value: PROMETHEUS_ADDRESS },
      ],
      metrics: [
        {
          name: SMOKE_METRIC,
          failureLimit: 0,
          provider: {
            job: {
              metadata: { labels: { [SMOKE_LABEL]: spec.name } },
              spec: smokeJobSpec(spec, call, `{{args.smoke-target}}:${spec.port}`),
            },
          },
        },
        ...measured,
      ],
    },
  };
}

/**
 * kustomize replacements: the smoke Job runs the image the tool's Deployment names, as the overlay
 * tagged it (the component's own objects are added after the overlay's `images:` ran).
 */
export function smokeImageReplacements(spec: ServiceSpec): object[] {
  return [
    deploymentImageReplacement(spec, [
      {
        select: { kind: "AnalysisTemplate", name: analysisTemplateName(spec.name) },
        fieldPaths: [
          `spec.metrics.[name=${SMOKE_METRIC}].provider.job.spec.template.spec.containers.[name=smoke].image`,
        ],
      },
    ]),
  ];
}

/**
 * Blue-green with Argo Rollouts. The Rollout names no replica count (the HPA scales it) and no
 * template (the Deployment's, scaled to zero, is the one source of the pod spec).
 */
export function rollout(spec: ServiceSpec): IRollout {
  // `Latest` is the ReplicaSet being released, before promotion and after; Argo knows no other value but `Stable`.
  const analysis = (through: string) => ({
    templates: [{ templateName: analysisTemplateName(spec.name) }],
    args: [
      { name: "pod-template-hash", valueFrom: { podTemplateHashValue: "Latest" } },
      { name: "smoke-target", value: serviceHost(through) },
    ],
  });
  return {
    apiVersion: "argoproj.io/v1alpha1",
    kind: "Rollout",
    metadata: { name: spec.name, namespace: NAMESPACE, labels: appLabels(spec) },
    spec: {
      revisionHistoryLimit: 5,
      selector: { matchLabels: podSelector(spec) },
      workloadRef: { apiVersion: "apps/v1", kind: "Deployment", name: spec.name },
      // Rolling back to the previous revision while its pods are still up skips the analysis: it is the known-good one.
      rollbackWindow: { revisions: 1 },
      strategy: {
        blueGreen: {
          activeService: spec.name,
          previewService: previewServiceName(spec.name),
          autoPromotionEnabled: true,
          prePromotionAnalysis: analysis(previewServiceName(spec.name)),
          postPromotionAnalysis: analysis(spec.name),
          scaleDownDelaySeconds: SCALE_DOWN_DELAY_SECONDS,
          abortScaleDownDelaySeconds: SCALE_DOWN_DELAY_SECONDS,
        },
      },
    },
  };
}

/** The Deployment the Rollout reads its template from: no pods of its own; placement spread per Argo ReplicaSet. */
export function rolloutTemplatePatch(spec: ServiceSpec): object {
  const spread = (topologyKey: string) => ({
    topologyKey,
    whenUnsatisfiable: "ScheduleAnyway",
    matchLabelKeys: [ARGO_HASH_LABEL],
  });
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: spec.name, namespace: NAMESPACE },
    spec: {
      replicas: 0,
      template: {
        spec: { topologySpreadConstraints: [spread("topology.kubernetes.io/zone"), spread("kubernetes.io/hostname")] },
      },
    },
  };
}

export function rolloutAutoscalerPatch(spec: ServiceSpec): object {
  return {
    apiVersion: "autoscaling/v2",
    kind: "HorizontalPodAutoscaler",
    metadata: { name: spec.name, namespace: NAMESPACE },
    spec: { scaleTargetRef: { apiVersion: "argoproj.io/v1alpha1", kind: "Rollout", name: spec.name } },
  };
}

/** JSON patch turning the base Deployment into the blue one (kustomize keeps the HPA's reference to it). */
export function blueDeploymentPatch(spec: ServiceSpec): object[] {
  return [
    { op: "replace", path: "/metadata/name", value: colourDeploymentName(spec.name, "blue") },
    { op: "add", path: `/metadata/labels/${COLOUR_LABEL}`, value: "blue" },
    { op: "add", path: `/spec/selector/matchLabels/${COLOUR_LABEL}`, value: "blue" },
    { op: "add", path: `/spec/template/metadata/labels/${COLOUR_LABEL}`, value: "blue" },
  ];
}

/**
 * The green Deployment as generated; its pod template is replaced by blue's (greenReplacements),
 * so it holds what other components patched into blue. No pods until a release scales it.
 */
export function greenDeployment(spec: ServiceSpec): Deployment {
  const base = deployment(spec, []);
  const colour = { [COLOUR_LABEL]: "green" };
  return {
    ...base,
    metadata: {
      ...base.metadata,
      name: colourDeploymentName(spec.name, "green"),
      labels: { ...base.metadata!.labels, ...colour },
    },
    spec: {
      ...base.spec!,
      replicas: 0,
      selector: { matchLabels: { ...podSelector(spec), ...colour } },
      template: {
        ...base.spec!.template,
        metadata: { labels: { ...base.spec!.template.metadata!.labels, ...colour } },
      },
    },
  };
}

/** kustomize replacements: green's pod template is blue's, then green's colour label is put back. */
export function greenReplacements(spec: ServiceSpec): object[] {
  const blue = { kind: "Deployment", name: colourDeploymentName(spec.name, "blue") };
  const green = { kind: "Deployment", name: colourDeploymentName(spec.name, "green") };
  return [
    { source: { ...blue, fieldPath: "spec.template" }, targets: [{ select: green, fieldPaths: ["spec.template"] }] },
    {
      source: { ...green, fieldPath: `spec.selector.matchLabels.${COLOUR_LABEL}` },
      targets: [{ select: green, fieldPaths: [`spec.template.metadata.labels.${COLOUR_LABEL}`] }],
    },
  ];
}

/** The tool's Service selects the active colour (blue until the first release). */
export function activeServicePatch(spec: ServiceSpec, colour: Colour): object {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: spec.name, namespace: NAMESPACE },
    spec: { selector: { [COLOUR_LABEL]: colour } },
  };
}
