// What a platform team checks before applying the manifests, on the rendered output: every tool
// has what it needs to run replicated and observed in prod (its workload — a Deployment, an Argo
// Rollout, or the blue and green Deployments of the plain release path —, headless Service,
// autoscaler, disruption budget and network policy over every colour, gRPC probes, ServiceMonitor
// and alert rules), every container is hardened, secrets go only where they are used, and SQLite
// never runs where a service can have more than one replica.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { IAnalysisTemplate } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/AnalysisTemplate";
import type { IRollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import { contractFiles } from "@loopguard/proto";
import { discoverServices, methodPolicy, minCallsToJudge, servicePolicy, type ServiceSpec } from "@loopguard/tool-sdk";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { HorizontalPodAutoscaler } from "kubernetes-types/autoscaling/v2.js";
import type { Container, PodSpec, PodTemplateSpec, Service } from "kubernetes-types/core/v1.js";
import type { LabelSelector } from "kubernetes-types/meta/v1.js";
import type { NetworkPolicy } from "kubernetes-types/networking/v1.js";
import type { PodDisruptionBudget } from "kubernetes-types/policy/v1.js";
import { beforeAll, describe, expect, it } from "vitest";
import { type K8sObject, renderAll, type Rendering } from "../src/manifests/renderings.js";
import { NAMESPACE } from "../src/manifests/cluster-names.js";
import { COLOUR_LABEL } from "../src/manifests/release-objects.js";
import { RUNNER_LABELS } from "../src/manifests/drill-runner-objects.js";
import { SMOKE_LABEL } from "../src/manifests/smoke-objects.js";
import { deployedServices, serviceSlos } from "../src/manifests/prometheus-files.js";
import { GATE_PASSES } from "../src/manifests/gate-queries.js";
import { BURN_RATE_ALERTS, pascalCase } from "../src/manifests/slo-rules.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const services = discoverServices(join(root, "services"));
const tools = services.filter((s) => s.kind === "tool");
const NAME_LABEL = "app.kubernetes.io/name";

let renderings: Rendering[];
beforeAll(() => {
  renderings = renderAll(root);
}, 60_000);

type Relabeling = { sourceLabels?: string[]; separator?: string; regex?: string; action?: string };

/**
 * A target prometheus-operator discovers through a Service, by its readiness meta label: the
 * Endpoints role (its default) and the EndpointSlice role (newer operators) name it differently, and
 * an EndpointSlice endpoint whose ready condition is unset carries none (consumers take it as ready).
 * A pod that is not ready (starting, waiting for its schema, terminating) is not scraped.
 */
const READINESS_CASES = [
  { role: "endpoints", ready: { __meta_kubernetes_endpoint_ready: "true" }, scraped: true },
  { role: "endpoints", ready: { __meta_kubernetes_endpoint_ready: "false" }, scraped: false },
  {
    role: "endpointslice",
    ready: { __meta_kubernetes_endpointslice_endpoint_conditions_ready: "true" },
    scraped: true,
  },
  {
    role: "endpointslice",
    ready: { __meta_kubernetes_endpointslice_endpoint_conditions_ready: "false" },
    scraped: false,
  },
  { role: "endpointslice", ready: {}, scraped: true },
] as const;

/** Prometheus's keep and drop relabelings: source labels joined by `;` (a missing one is ""), the regex anchored. */
function keptByRelabelings(relabelings: readonly Relabeling[], labels: Readonly<Record<string, string>>): boolean {
  return relabelings.every((r) => {
    const value = (r.sourceLabels ?? []).map((l) => labels[l] ?? "").join(r.separator ?? ";");
    const matches = new RegExp(`^(?:${r.regex ?? "(.*)"})$`).test(value);
    const action = (r.action ?? "replace").toLowerCase();
    if (action === "keep") return matches;
    if (action === "drop") return !matches;
    throw new Error(`relabeling action ${action} is not modelled here`);
  });
}

const prodRenderings = () => renderings.filter((r) => r.name.startsWith("overlays/prod"));

function ofKind<T>(objects: readonly K8sObject[], apiVersion: string, kind: string): (K8sObject & T)[] {
  return objects.filter((o) => o.apiVersion === apiVersion && o.kind === kind) as (K8sObject & T)[];
}

/** What runs a service's pods: a Deployment, or a Rollout with the pod template of the Deployment it references. */
interface Workload {
  readonly object: K8sObject & { spec: { replicas?: number } };
  readonly template: PodTemplateSpec;
}

function workloads(objects: readonly K8sObject[]): Workload[] {
  const deployments = ofKind<Deployment>(objects, "apps/v1", "Deployment");
  const rollouts = ofKind<IRollout>(objects, "argoproj.io/v1alpha1", "Rollout");
  const referenced = new Set(rollouts.map((r) => r.spec.workloadRef?.name).filter(Boolean));
  return [
    ...rollouts.map((r) => {
      const source = r.spec.workloadRef
        ? deployments.find((d) => d.metadata.name === r.spec.workloadRef!.name)
        : undefined;
      const template = (source ? source.spec!.template : r.spec.template) as PodTemplateSpec | undefined;
      expect(template, `Rollout ${r.metadata.name}: a template or a workloadRef to a Deployment`).toBeDefined();
      return { object: r, template: template! };
    }),
    ...deployments
      .filter((d) => !referenced.has(d.metadata.name))
      .map((d) => ({ object: d, template: d.spec!.template })),
  ] as Workload[];
}

/** The workloads of one service: one, or two for a tool on the plain blue-green path. */
function workloadsOf(objects: readonly K8sObject[], name: string): Workload[] {
  const found = workloads(objects).filter((w) => w.template.metadata?.labels?.[NAME_LABEL] === name);
  expect(found.length, `${name}: a Deployment or Rollout, or blue and green Deployments`).toBeGreaterThan(0);
  return found;
}

function selects(
  selector: LabelSelector | Record<string, string> | undefined,
  labels: Record<string, string> | undefined,
): boolean {
  const matchLabels =
    selector && "matchLabels" in selector
      ? (selector.matchLabels as Record<string, string>)
      : (selector as Record<string, string> | undefined);
  if (!matchLabels || Object.keys(matchLabels).length === 0) return false;
  return Object.entries(matchLabels).every(([key, value]) => labels?.[key] === value);
}

const labelsOf = (workload: Workload) => workload.template.metadata!.labels;

/** The pod specs of the smoke Jobs the release paths' AnalysisTemplates run. */
function smokePods(objects: readonly K8sObject[]): { name: string; pod: PodSpec }[] {
  return ofKind<IAnalysisTemplate>(objects, "argoproj.io/v1alpha1", "AnalysisTemplate").flatMap((t) =>
    t.spec.metrics.flatMap((m) =>
      m.provider.job
        ? [{ name: `${t.metadata.name}/${m.name}`, pod: m.provider.job.spec.template.spec as PodSpec }]
        : [],
    ),
  );
}

/** Every pod template of a rendering, whatever owns it (Deployments, Rollouts, Jobs, CronJobs), by its owner. */
function allPods(objects: readonly K8sObject[]): { owner: string; pod: PodSpec }[] {
  return objects.flatMap((object) => {
    const spec = object.spec as
      | { template?: PodTemplateSpec; jobTemplate?: { spec?: { template?: PodTemplateSpec } } }
      | undefined;
    const pod = spec?.template?.spec ?? spec?.jobTemplate?.spec?.template?.spec;
    return pod ? [{ owner: `${object.kind}/${object.metadata.name}`, pod }] : [];
  });
}

/** Every container and init container of a rendering: its pod templates' (CronJobs' included) and the smoke Jobs'. */
function everyContainer(objects: readonly K8sObject[]): { owner: string; container: Container }[] {
  return [...allPods(objects), ...smokePods(objects).map((s) => ({ owner: s.name, pod: s.pod }))].flatMap(
    ({ owner, pod }) => [...(pod.initContainers ?? []), ...pod.containers].map((container) => ({ owner, container })),
  );
}

function podSpec(workload: Workload): PodSpec {
  return workload.template.spec!;
}

function mainContainer(workload: Workload): Container {
  return podSpec(workload).containers.find((c) => c.name === labelsOf(workload)?.[NAME_LABEL])!;
}

function envValue(container: Container, name: string): string | undefined {
  return container.env?.find((e) => e.name === name)?.value;
}

/** The tool's own headless Service: the name clients resolve. */
function toolService(objects: readonly K8sObject[], name: string): K8sObject & Service {
  const [service] = ofKind<Service>(objects, "v1", "Service").filter((s) => s.metadata.name === name);
  expect(service, `Service ${name}`).toBeDefined();
  return service!;
}

/** The workload that serves the tool's clients: the one its Service selects (the active colour), or its Rollout. */
function activeWorkload(objects: readonly K8sObject[], name: string): Workload {
  const all = workloadsOf(objects, name);
  const rollout = all.find((w) => w.object.kind === "Rollout");
  if (rollout) return rollout;
  const selected = all.filter((w) => selects(toolService(objects, name).spec!.selector, labelsOf(w)));
  expect(selected, `${name}: its Service selects one workload`).toHaveLength(1);
  return selected[0]!;
}

describe.each(tools.map((t) => [t.name, t] as const))("prod: tool %s", (_name, tool: ServiceSpec) => {
  it("has a Deployment or Rollout under an autoscaling/v2 HPA (min ≥ 2), every colour spread over nodes and zones, an idle colour or template holder without pods", () => {
    for (const { name, objects } of prodRenderings()) {
      const active = activeWorkload(objects, tool.name);
      const own = workloadsOf(objects, tool.name);
      const hpa = ofKind<HorizontalPodAutoscaler>(objects, "autoscaling/v2", "HorizontalPodAutoscaler").filter((h) =>
        own.some(
          (w) =>
            w.object.kind === h.spec!.scaleTargetRef.kind && w.object.metadata.name === h.spec!.scaleTargetRef.name,
        ),
      );
      expect(hpa, `${name}: HPA of ${tool.name}`).toHaveLength(1);
      expect(hpa[0]!.spec!.scaleTargetRef, name).toMatchObject({
        kind: active.object.kind,
        name: active.object.metadata.name,
      });
      expect(hpa[0]!.spec!.minReplicas, name).toBeGreaterThanOrEqual(2);
      expect(hpa[0]!.spec!.maxReplicas, name).toBeGreaterThan(hpa[0]!.spec!.minReplicas!);
      for (const workload of own) {
        const pod = podSpec(workload);
        expect(
          pod.topologySpreadConstraints?.map((c) => c.topologyKey),
          name,
        ).toEqual(expect.arrayContaining(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]));
        expect(pod.affinity?.podAntiAffinity, name).toBeDefined();
        if (workload.object !== active.object)
          expect(workload.object.spec.replicas, `${name}: idle ${workload.object.metadata.name}`).toBe(0);
      }
      const rollout = active.object as K8sObject & IRollout;
      if (rollout.kind === "Rollout" && rollout.spec.workloadRef) {
        const holder = ofKind<Deployment>(objects, "apps/v1", "Deployment").find(
          (d) => d.metadata.name === rollout.spec.workloadRef!.name,
        );
        expect(
          holder?.spec?.replicas,
          `${name}: the Deployment ${tool.name}'s Rollout takes its template from runs no pods`,
        ).toBe(0);
      }
    }
  });

  it("has a headless Service with its gRPC port selecting the active pods, and a PodDisruptionBudget over every colour's pods", () => {
    for (const { name, objects } of prodRenderings()) {
      const service = toolService(objects, tool.name);
      expect(service.spec!.clusterIP, name).toBe("None");
      expect(selects(service.spec!.selector, labelsOf(activeWorkload(objects, tool.name))), name).toBe(true);
      expect(
        service.spec!.ports!.map((p) => p.port),
        name,
      ).toContain(tool.port);
      for (const workload of workloadsOf(objects, tool.name)) {
        const pdb = ofKind<PodDisruptionBudget>(objects, "policy/v1", "PodDisruptionBudget").filter((p) =>
          selects(p.spec!.selector, labelsOf(workload)),
        );
        expect(pdb, `${name}: ${workload.object.metadata.name}`).toHaveLength(1);
        expect(pdb[0]!.spec!.maxUnavailable ?? pdb[0]!.spec!.minAvailable, name).toBeDefined();
      }
    }
  });

  it("has a NetworkPolicy over every colour's pods that admits the orchestrator (and, on a release path, its own smoke checks) on its gRPC port only", () => {
    for (const { name, objects } of prodRenderings()) {
      const orchestratorLabels = labelsOf(activeWorkload(objects, "orchestrator"));
      const smokeLabels = { [SMOKE_LABEL]: tool.name };
      for (const workload of workloadsOf(objects, tool.name)) {
        const where = `${name}: ${workload.object.metadata.name}`;
        const policies = ofKind<NetworkPolicy>(objects, "networking.k8s.io/v1", "NetworkPolicy").filter((p) =>
          selects(p.spec!.podSelector, labelsOf(workload)),
        );
        const grpcRules = policies
          .flatMap((p) => p.spec!.ingress ?? [])
          .filter((rule) => rule.ports?.some((port) => port.port === tool.port));
        expect(grpcRules.length, where).toBeGreaterThan(0);
        for (const rule of grpcRules) {
          expect(rule.from?.length, where).toBeGreaterThan(0);
          for (const peer of rule.from!) {
            const admitted =
              selects(peer.podSelector, orchestratorLabels) ||
              (/release|rollouts|blue-green/.test(name) && selects(peer.podSelector, smokeLabels)) ||
              // The drill's ledger audit reads billing (network-flows.ts has the flow).
              (tool.name === "billing" && /chaos-drills/.test(name) && selects(peer.podSelector, RUNNER_LABELS));
            expect(admitted && !peer.namespaceSelector, `${where}: ${JSON.stringify(peer)}`).toBe(true);
          }
        }
      }
    }
  });

  it("has native gRPC startup, readiness and liveness probes on its gRPC port in every colour, and a drain that fits the grace period", () => {
    for (const { name, objects } of prodRenderings()) {
      for (const workload of workloadsOf(objects, tool.name)) {
        const where = `${name}: ${workload.object.metadata.name}`;
        const container = mainContainer(workload);
        for (const probe of [container.startupProbe, container.readinessProbe, container.livenessProbe])
          expect(probe?.grpc?.port, where).toBe(tool.port);
        const drainMs = Number(envValue(container, `${tool.envPrefix}_SHUTDOWN_GRACE_MS`));
        const preStop = container.lifecycle?.preStop?.sleep?.seconds ?? 0;
        expect(drainMs, where).toBeGreaterThan(0);
        expect(preStop, where).toBeGreaterThan(0);
        expect(podSpec(workload).terminationGracePeriodSeconds, where).toBeGreaterThanOrEqual(
          preStop + (2 * drainMs) / 1000,
        );
      }
    }
  });

  it("has a ServiceMonitor scraping every colour's pods once, on the HTTP port, as job <tool>, and alert rules from its contract", () => {
    for (const { name, objects } of prodRenderings()) {
      type Monitor = {
        spec: {
          selector: LabelSelector;
          jobLabel?: string;
          endpoints: { port?: string; relabelings?: Relabeling[] }[];
        };
      };
      const monitors = ofKind<Monitor>(objects, "monitoring.coreos.com/v1", "ServiceMonitor");
      const scraped = ofKind<Service>(objects, "v1", "Service").flatMap((service) =>
        monitors
          .filter((m) => selects(m.spec.selector, service.metadata.labels))
          .map((monitor) => ({ service, monitor })),
      );
      const ofTool = scraped.filter(({ service }) =>
        workloadsOf(objects, tool.name).some((w) => selects(service.spec!.selector, labelsOf(w))),
      );
      expect(
        ofTool.map(({ service }) => service.metadata.name),
        `${name}: one scraped Service of ${tool.name}`,
      ).toHaveLength(1);
      const { service, monitor } = ofTool[0]!;
      for (const workload of workloadsOf(objects, tool.name))
        expect(
          selects(service.spec!.selector, labelsOf(workload)),
          `${name}: ${workload.object.metadata.name} scraped`,
        ).toBe(true);
      const job = monitor.spec.jobLabel ? service.metadata.labels?.[monitor.spec.jobLabel] : service.metadata.name;
      expect(job, `${name}: the job the Down alert watches`).toBe(tool.name);
      const metricsPort = service.spec!.ports!.find((p) => p.name === monitor.spec.endpoints[0]!.port);
      expect(metricsPort?.port, name).toBe(tool.metricsPort);
      for (const { role, ready, scraped } of READINESS_CASES)
        expect(
          keptByRelabelings(monitor.spec.endpoints[0]!.relabelings ?? [], ready),
          `${name}: ${tool.name}'s ${role} target ${JSON.stringify(ready)} scraped`,
        ).toBe(scraped);

      const alerts = ofKind<{ spec: { groups: { name: string; rules: { alert?: string }[] }[] } }>(
        objects,
        "monitoring.coreos.com/v1",
        "PrometheusRule",
      )
        .flatMap((r) => r.spec.groups)
        .filter((g) => g.name === `loopguard-slo-${tool.name}`)
        .flatMap((g) => g.rules.map((r) => r.alert))
        .filter(Boolean);
      const contract = deployedServices(contractFiles, [tool]);
      expect(contract.map((s) => servicePolicy(s).toolName)).toEqual([tool.name]);
      const expected = [
        `${pascalCase(tool.name)}Down`,
        ...contract[0]!.methods
          .filter((m) => m.methodKind === "unary" && methodPolicy(m).sla)
          .flatMap((m) => [
            `${pascalCase(tool.name)}${m.name}LatencyAboveSlo`,
            ...BURN_RATE_ALERTS.map((b) => `${pascalCase(tool.name)}${m.name}${b.kind}`),
          ]),
      ];
      expect(alerts, name).toEqual(expect.arrayContaining(expected));
    }
  });
});

describe.each(tools.map((t) => [t.name, t] as const))("prod release paths: tool %s", (_name, tool: ServiceSpec) => {
  const withPath = (component: string) => prodRenderings().filter((r) => r.name.includes(`components/${component}`));

  it("argo-rollouts: a blueGreen Rollout between its Service and a headless preview Service, gated by its contract's SLO analysis before and after promotion", () => {
    const renderingsWithArgo = withPath("argo-rollouts");
    expect(renderingsWithArgo.length).toBeGreaterThan(0);
    const slos = serviceSlos(root, contractFiles, [tool]).filter((s) => s.tool === tool.name);
    for (const { name, objects } of renderingsWithArgo) {
      const [rollout] = ofKind<IRollout>(objects, "argoproj.io/v1alpha1", "Rollout").filter(
        (r) => r.metadata.name === tool.name,
      );
      const blueGreen = rollout!.spec.strategy!.blueGreen!;
      expect(blueGreen.activeService, name).toBe(tool.name);
      const preview = toolService(objects, blueGreen.previewService!);
      expect(preview.spec!.clusterIP, name).toBe("None");
      expect(
        preview.spec!.ports!.map((p) => p.port),
        name,
      ).toContain(tool.port);
      expect(blueGreen.scaleDownDelaySeconds, name).toBeGreaterThan(30);
      expect(blueGreen.autoPromotionEnabled === false || blueGreen.prePromotionAnalysis !== undefined, name).toBe(true);
      // The analysis Jobs run in the suite's namespace: the short Service name reaches the colour.
      for (const [analysis, through] of [
        [blueGreen.prePromotionAnalysis!, blueGreen.previewService!],
        [blueGreen.postPromotionAnalysis!, tool.name],
      ] as const) {
        // Argo fills podTemplateHashValue with Stable or Latest only; anything else leaves the hash empty and the queries match nothing.
        expect(analysis.args, name).toEqual([
          { name: "pod-template-hash", valueFrom: { podTemplateHashValue: "Latest" } },
          { name: "smoke-target", value: through },
        ]);
        const [template] = ofKind<IAnalysisTemplate>(objects, "argoproj.io/v1alpha1", "AnalysisTemplate").filter(
          (t) => t.metadata.name === analysis.templates![0]!.templateName,
        );
        const metrics = template!.spec.metrics;
        const smoke = metrics.find((m) => m.provider.job)!;
        expect(smoke.failureLimit, name).toBe(0);
        expect(smoke.provider.job!.spec.backoffLimit, name).toBe(0);
        expect(smoke.provider.job!.spec.template.spec!.containers[0]!.args, name).toEqual(
          expect.arrayContaining(["--tool", tool.name, "--target", `{{args.smoke-target}}:${tool.port}`]),
        );
        const gates = metrics.filter((m) => m.provider.prometheus);
        expect(gates.map((m) => m.name).sort(), name).toEqual(["error-ratio", "p95"]);
        for (const gate of gates) {
          // Never a pass without an answer: an empty result or a NaN fails; one bad measurement of the count is forgiven, two are not.
          expect(gate.successCondition, name).toBe(GATE_PASSES);
          expect(gate.failureCondition, name).toBeUndefined();
          expect(Number(gate.failureLimit), name).toBeLessThan(Number(gate.count) / 2);
          expect(Number(gate.consecutiveErrorLimit), name).toBeGreaterThan(0);
          for (const slo of slos) {
            const target = gate.name === "p95" ? slo.p95TargetMs / 1000 : slo.errorRateBudget;
            const query = gate.provider.prometheus!.query!;
            expect(query, `${name}: ${slo.method.name} ${gate.name}`).toContain(
              `grpc_method=~"${slo.method.name}",rollouts_pod_template_hash="{{args.pod-template-hash}}"`,
            );
            expect(query, `${name}: ${slo.method.name} ${gate.name}`).toMatch(
              new RegExp(
                `\\) / ${target}\nand on \\(grpc_service, grpc_method\\)\n.*grpc_method="${slo.method.name}",.*>= ${minCallsToJudge(slo.errorRateBudget)}\n`,
              ),
            );
          }
        }
      }
    }
  });

  it("plain-blue-green: blue and green Deployments alike but for their version label, the Service on blue, the preview on green", () => {
    const renderingsWithPlain = withPath("plain-blue-green");
    expect(renderingsWithPlain.length).toBeGreaterThan(0);
    for (const { name, objects } of renderingsWithPlain) {
      const byColour = new Map(workloadsOf(objects, tool.name).map((w) => [labelsOf(w)?.[COLOUR_LABEL], w]));
      expect([...byColour.keys()].sort(), name).toEqual(["blue", "green"]);
      const withoutColour = (w: Workload) => ({
        ...w.template,
        metadata: { labels: { ...labelsOf(w), [COLOUR_LABEL]: "" } },
      });
      expect(withoutColour(byColour.get("green")!), name).toEqual(withoutColour(byColour.get("blue")!));
      expect(toolService(objects, tool.name).spec!.selector?.[COLOUR_LABEL], name).toBe("blue");
      expect(toolService(objects, `${tool.name}-preview`).spec!.selector?.[COLOUR_LABEL], name).toBe("green");
    }
  });
});

describe("prod", () => {
  it("runs every stateful service on PostgreSQL, its DSN a file mounted from its Secret", () => {
    for (const { name, objects } of prodRenderings()) {
      for (const spec of services.filter((s) => s.stateful)) {
        for (const workload of workloadsOf(objects, spec.name)) {
          const where = `${name}: ${workload.object.metadata.name}`;
          const container = mainContainer(workload);
          expect(
            container.env?.find((e) => e.name === `${spec.envPrefix}_STORE`),
            where,
          ).toBeUndefined();
          const file = container.env?.find((e) => e.name === `${spec.envPrefix}_STORE_FILE`)?.value ?? "";
          const mount = container.volumeMounts?.find((m) => file.startsWith(`${m.mountPath}/`));
          const volume = podSpec(workload).volumes?.find((v) => v.name === mount?.name);
          expect(volume?.secret?.secretName, where).toBe(`loopguard-${spec.name}-store`);
          expect(volume?.secret?.items, where).toEqual([{ key: "dsn", path: file.slice(mount!.mountPath.length + 1) }]);
        }
      }
    }
  });

  it("gives no container a secret in its environment: each is a file mounted from its Secret", () => {
    for (const { name, objects } of renderings) {
      for (const { owner, pod } of [
        ...allPods(objects),
        ...smokePods(objects).map((p) => ({ owner: p.name, pod: p.pod })),
      ]) {
        for (const container of [...(pod.initContainers ?? []), ...pod.containers]) {
          const where = `${name}: ${owner}: ${container.name}`;
          expect(
            container.env?.filter((e) => e.valueFrom?.secretKeyRef).map((e) => e.name),
            where,
          ).toEqual([]);
          expect(container.envFrom?.filter((e) => e.secretRef) ?? [], where).toEqual([]);
        }
      }
    }
  });

  it("pins every image (CronJobs', Jobs' and smoke Jobs' too) to a tag other than latest, the suite's in the overlay's registry", () => {
    for (const { name, objects } of prodRenderings()) {
      for (const { owner, container } of everyContainer(objects)) {
        const where = `${name}: ${owner}/${container.name}`;
        expect(container.image, where).not.toMatch(/:latest$/);
        if (container.image?.includes("loopguard/"))
          expect(container.image, where).toMatch(/^registry\.example\.com\//);
      }
    }
  });
});

describe("every rendering", () => {
  it("runs every container (smoke Jobs' too) non-root, with a read-only root filesystem, no privilege escalation, no capabilities, seccomp and resource limits", () => {
    for (const { name, objects } of renderings) {
      const pods = [
        ...workloads(objects).map((w) => ({ name: w.object.metadata.name, pod: podSpec(w) })),
        ...smokePods(objects),
      ];
      for (const { name: owner, pod } of pods) {
        for (const container of [...(pod.initContainers ?? []), ...pod.containers]) {
          const where = `${name}: ${owner}/${container.name}`;
          const effective = { ...pod.securityContext, ...container.securityContext };
          expect(effective.runAsNonRoot, where).toBe(true);
          expect(effective.runAsUser, where).toBeGreaterThan(0);
          expect(container.securityContext?.readOnlyRootFilesystem, where).toBe(true);
          expect(container.securityContext?.allowPrivilegeEscalation, where).toBe(false);
          expect(container.securityContext?.capabilities?.drop, where).toEqual(["ALL"]);
          expect(effective.seccompProfile?.type, where).toBe("RuntimeDefault");
          for (const resource of ["cpu", "memory"]) {
            expect(container.resources?.requests?.[resource], `${where} requests ${resource}`).toBeDefined();
            expect(container.resources?.limits?.[resource], `${where} limits ${resource}`).toBeDefined();
          }
        }
      }
    }
  });

  it("runs every pod under a ServiceAccount the rendering declares, never the namespace's default", () => {
    for (const { name, objects } of renderings) {
      const accounts = new Set(objects.filter((o) => o.kind === "ServiceAccount").map((o) => o.metadata.name));
      for (const { owner, pod } of allPods(objects))
        expect(
          accounts.has(pod.serviceAccountName ?? "default"),
          `${name}: ${owner} runs as ${pod.serviceAccountName ?? "default"}`,
        ).toBe(true);
    }
  });

  it("names a tag for every image, on a component layered over an overlay too (an overlay's `images:` list names every service)", () => {
    for (const { name, objects } of renderings) {
      for (const { owner, container } of everyContainer(objects)) {
        expect(container.image, `${name}: ${owner}/${container.name} has no tag in the overlay's images:`).toMatch(
          /:\w[\w.-]*$/,
        );
      }
    }
  });

  it("gives every workload (and the smoke Jobs) its own ServiceAccount and no API token but the Collector's pods", () => {
    for (const { name, objects } of renderings) {
      const accounts = new Map(objects.filter((o) => o.kind === "ServiceAccount").map((o) => [o.metadata.name, o]));
      for (const { name: owner, pod } of [
        ...workloads(objects).map((w) => ({ name: w.object.metadata.name, pod: podSpec(w) })),
        ...smokePods(objects),
      ]) {
        // k8sattributes reads pods with it; k8s-collector.test.ts checks its Role.
        expect(pod.automountServiceAccountToken, `${name}: ${owner}`).toBe(owner === "otel-collector");
        expect(accounts.get(pod.serviceAccountName!)?.automountServiceAccountToken, `${name}: ${owner}`).toBe(false);
      }
    }
  });

  it("mounts the token signing key and call secrets into the orchestrator only, each tool's call key into that tool only, and every service's secret files where it reads them", () => {
    for (const { name, objects } of renderings) {
      const mounting = (secret: string) =>
        workloads(objects)
          .filter((w) => podSpec(w).volumes?.some((v) => v.secret?.secretName === secret))
          .map((w) => w.object.metadata.name);
      expect(mounting("loopguard-signing-key"), name).toEqual(["orchestrator"]);
      expect(mounting("loopguard-call-secrets"), name).toEqual(["orchestrator"]);
      for (const tool of services.filter((s) => s.kind === "tool")) {
        const holders = mounting(`loopguard-call-keys-${tool.name}`);
        expect(holders.length, `${name}: ${tool.name}'s call key`).toBeGreaterThan(0);
        expect(
          holders.filter((w) => !workloadsOf(objects, tool.name).some((o) => o.object.metadata.name === w)),
          `${name}: ${tool.name}'s call key mounted by another workload`,
        ).toEqual([]);
        for (const workload of workloadsOf(objects, tool.name)) {
          expect(envValue(mainContainer(workload), `${tool.envPrefix}_CALL_KEYS_FILE`), name).toBe(
            `/etc/loopguard/call-keys-${tool.name}/call-keys.json`,
          );
        }
      }
      for (const spec of services) {
        for (const workload of workloadsOf(objects, spec.name)) {
          const container = mainContainer(workload);
          const where = `${name}: ${workload.object.metadata.name}`;
          expect(envValue(container, "LOOPGUARD_JWKS_FILE"), where).toBe("/etc/loopguard/jwks/jwks.json");
          const signingKey = envValue(container, "LOOPGUARD_SIGNING_KEY_FILE");
          expect(signingKey !== undefined, `${where} LOOPGUARD_SIGNING_KEY_FILE`).toBe(spec.kind === "orchestrator");
          for (const variable of Object.keys(spec.secretFiles)) {
            const path = envValue(container, variable)!;
            expect(
              container.volumeMounts?.some((m) => path.startsWith(`${m.mountPath}/`) && m.readOnly),
              `${where} ${variable}`,
            ).toBe(true);
          }
        }
      }
    }
  });

  it("holds the token signing key and call secrets in the orchestrator's serving container alone: no init container, migrate Job or other pod", () => {
    for (const { name, objects } of renderings) {
      const holders: string[] = [];
      for (const { owner, pod } of allPods(objects)) {
        const secretVolumes = new Set(
          (pod.volumes ?? [])
            .filter((v) => ["loopguard-signing-key", "loopguard-call-secrets"].includes(v.secret?.secretName ?? ""))
            .map((v) => v.name),
        );
        for (const container of [...(pod.initContainers ?? []), ...pod.containers])
          if (container.volumeMounts?.some((m) => secretVolumes.has(m.name)))
            holders.push(`${owner}:${container.name}`);
      }
      expect([...new Set(holders)], name).toEqual([
        expect.stringMatching(/^(Deployment|Rollout)\/orchestrator:orchestrator$/),
      ]);
    }
  });

  it("runs SQLite only where the service cannot get a second replica", () => {
    for (const { name, objects } of renderings) {
      const autoscaled = new Set(
        ofKind<HorizontalPodAutoscaler>(objects, "autoscaling/v2", "HorizontalPodAutoscaler").map(
          (h) => h.spec!.scaleTargetRef.name,
        ),
      );
      for (const spec of services.filter((s) => s.stateful)) {
        const all = workloadsOf(objects, spec.name);
        for (const workload of all) {
          const env = mainContainer(workload).env;
          if (env?.some((e) => e.name === `${spec.envPrefix}_STORE_FILE`)) continue;
          const store = env?.find((e) => e.name === `${spec.envPrefix}_STORE`);
          const where = `${name}: ${workload.object.metadata.name} on ${store?.value ?? "the default SQLite store"}`;
          expect(
            all.map((w) => w.object.kind),
            `${where}: a second colour or a Rollout's new pods would be a second replica`,
          ).toEqual(["Deployment"]);
          expect(autoscaled.has(workload.object.metadata.name), where).toBe(false);
          expect(workload.object.spec.replicas ?? 1, where).toBe(1);
          expect((workload.object as K8sObject & Deployment).spec?.strategy?.type, where).toBe("Recreate");
        }
      }
    }
  });

  it("puts everything in namespace loopguard, behind a default-deny NetworkPolicy", () => {
    for (const { name, objects } of renderings) {
      for (const object of objects.filter((o) => o.kind !== "Namespace"))
        expect(object.metadata.namespace, `${name}: ${object.kind} ${object.metadata.name}`).toBe(NAMESPACE);
      const denyAll = ofKind<NetworkPolicy>(objects, "networking.k8s.io/v1", "NetworkPolicy").filter(
        (p) =>
          Object.keys(p.spec!.podSelector).length === 0 &&
          p.spec!.policyTypes?.length === 2 &&
          !p.spec!.ingress &&
          !p.spec!.egress,
      );
      expect(denyAll, name).toHaveLength(1);
    }
  });
});
