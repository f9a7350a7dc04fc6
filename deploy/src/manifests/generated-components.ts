// The generated parts of deploy/k8s, rendered in memory: the services' base objects and the
// per-service components the overlays pick (monitoring, high availability, SQLite volumes,
// PostgreSQL stores, the two blue-green release paths of the tools). `pnpm gen` writes them;
// tests and CI check the committed copies are current.
import { join } from "node:path";
import { type ServiceSpec, smokeCallOf } from "@loopguard/tool-sdk";
import { storePoolSizes } from "./postgres-budget.js";
import { horizontalPodAutoscaler, podDisruptionBudget } from "./availability-objects.js";
import { podSelector } from "./cluster-names.js";
import { postgresEgress, postgresStore, sqliteVolume } from "./store-objects.js";
import { prometheusRule, serviceMonitor } from "./monitoring-objects.js";
import { serviceObjects } from "./service-objects.js";
import { shippedPodKills } from "./pod-chaos-objects.js";
import {
  drillRunnerImageCarrier,
  drillRunnerImageReplacements,
  drillRunnerNetworkPolicies,
  drillRunnerRbac,
  drillRunnerTemplate,
} from "./drill-runner-objects.js";
import {
  migrateInitContainer,
  migrateJob,
  migrationStepPatch,
  waitForSchemaInitContainer,
} from "./migration-objects.js";
import {
  activeServicePatch,
  analysisTemplate,
  ARGO_HASH_LABEL,
  blueDeploymentPatch,
  COLOUR_LABEL,
  greenDeployment,
  greenReplacements,
  metricsService,
  previewService,
  RELEASE_LABEL,
  rollout,
  rolloutAutoscalerPatch,
  rolloutTemplatePatch,
  serviceMonitorPatch,
  smokeImageReplacements,
  workloadTarget,
} from "./release-objects.js";
import { smokeNetworkPolicies, smokeServiceAccount } from "./smoke-objects.js";
import {
  patrolCronJob,
  patrolGoldenSet,
  patrolImageReplacements,
  patrolNetworkPolicy,
  patrolServiceAccount,
} from "./patrol-objects.js";
import { GENERATED_HEADER } from "./prometheus-files.js";
import type { MethodSlo, RuleFile } from "./slo-rules.js";
import { toYaml, toYamlDocuments } from "./yaml.js";

export const K8S_DIR = join("deploy", "k8s");
export const BASE_SERVICES_DIR = join(K8S_DIR, "base", "services");
export const COMPONENTS_DIR = join(K8S_DIR, "components");
export const OVERLAYS_DIR = join(K8S_DIR, "overlays");

/** The blue-green release paths of the tools: at most one of them in a rendering. */
export const RELEASE_COMPONENTS = ["argo-rollouts", "plain-blue-green"] as const;
export type ReleasePath = (typeof RELEASE_COMPONENTS)[number];

/** Components whose content is generated, by folder name. */
export const GENERATED_COMPONENTS = [
  "monitoring",
  "high-availability",
  "sqlite-volumes",
  "postgres-stores",
  "chaos-drills",
  "patrol",
  ...RELEASE_COMPONENTS,
] as const;

/** A kustomize patch file; with a target it applies to every object the target selects (none is no error). */
type Patch = { readonly path: string; readonly target?: object };

function kustomization(resources: readonly string[]): object {
  return { apiVersion: "kustomize.config.k8s.io/v1beta1", kind: "Kustomization", resources };
}

function component(
  resources: readonly string[],
  patches: readonly Patch[] = [],
  replacements: readonly object[] = [],
): object {
  return {
    apiVersion: "kustomize.config.k8s.io/v1alpha1",
    kind: "Component",
    ...(resources.length > 0 ? { resources } : {}),
    ...(patches.length > 0 ? { patches } : {}),
    ...(replacements.length > 0 ? { replacements } : {}),
  };
}

/** What the generated files derive from besides the services' manifests. */
export interface SloInputs {
  /** The rule groups of deploy/prometheus/rules/ (a file per group). */
  readonly rules: RuleFile;
  /** Every unary method's SLO (contract or override), for the release analysis. */
  readonly methods: readonly MethodSlo[];
}

/** Path relative to the repository root → file content. */
export function renderK8sFiles(services: readonly ServiceSpec[], slo: SloInputs): Map<string, string> {
  const files = new Map<string, string>();
  const put = (dir: string, name: string, content: object | object[]) =>
    files.set(
      join(dir, name),
      Array.isArray(content) ? toYamlDocuments(content, GENERATED_HEADER) : toYaml(content, GENERATED_HEADER),
    );
  const stateful = services.filter((s) => s.stateful);
  const tools = services.filter((s) => s.kind === "tool");
  // Patches of a service's Deployment reach every Deployment of it: both colours of a blue-green tool.
  const ofWorkloads = (names: readonly ServiceSpec[], file: (s: ServiceSpec) => string): Patch[] =>
    names.map((s) => ({ path: file(s), target: workloadTarget(s) }));
  const perService = (name: string) => services.map((s) => `${s.name}.${name}.yaml`);

  for (const spec of services) put(BASE_SERVICES_DIR, `${spec.name}.yaml`, serviceObjects(spec, services));
  put(BASE_SERVICES_DIR, "drill-runner.image.yaml", drillRunnerImageCarrier());
  put(
    BASE_SERVICES_DIR,
    "kustomization.yaml",
    kustomization([...services.map((s) => `${s.name}.yaml`), "drill-runner.image.yaml"]),
  );

  const monitoring = join(COMPONENTS_DIR, "monitoring");
  for (const spec of services) put(monitoring, `${spec.name}.service-monitor.yaml`, serviceMonitor(spec));
  put(monitoring, "prometheus-rule.yaml", prometheusRule(slo.rules));
  put(monitoring, "kustomization.yaml", component([...perService("service-monitor"), "prometheus-rule.yaml"]));

  const highAvailability = join(COMPONENTS_DIR, "high-availability");
  for (const spec of services)
    put(highAvailability, `${spec.name}.yaml`, [horizontalPodAutoscaler(spec), podDisruptionBudget(spec)]);
  put(highAvailability, "kustomization.yaml", component(services.map((s) => `${s.name}.yaml`)));

  const sqlite = join(COMPONENTS_DIR, "sqlite-volumes");
  for (const spec of stateful) {
    const { claim, patch } = sqliteVolume(spec);
    put(sqlite, `${spec.name}.claim.yaml`, claim);
    put(sqlite, `${spec.name}.patch.yaml`, patch);
    put(sqlite, `${spec.name}.migration.patch.yaml`, migrationStepPatch(spec, migrateInitContainer(spec)));
  }
  put(
    sqlite,
    "kustomization.yaml",
    component(
      stateful.map((s) => `${s.name}.claim.yaml`),
      [
        ...ofWorkloads(stateful, (s) => `${s.name}.patch.yaml`),
        ...ofWorkloads(stateful, (s) => `${s.name}.migration.patch.yaml`),
      ],
    ),
  );

  const postgres = join(COMPONENTS_DIR, "postgres-stores");
  const poolSizes = storePoolSizes(stateful);
  for (const spec of stateful) {
    put(postgres, `${spec.name}.patch.yaml`, postgresStore(spec, poolSizes[spec.name]!));
    put(postgres, `${spec.name}.migration.patch.yaml`, migrationStepPatch(spec, waitForSchemaInitContainer(spec)));
    put(postgres, `${spec.name}.migrate-job.yaml`, migrateJob(spec));
  }
  put(postgres, "network-policy.yaml", postgresEgress());
  put(
    postgres,
    "kustomization.yaml",
    component(
      ["network-policy.yaml", ...stateful.map((s) => `${s.name}.migrate-job.yaml`)],
      [
        ...ofWorkloads(stateful, (s) => `${s.name}.patch.yaml`),
        ...ofWorkloads(stateful, (s) => `${s.name}.migration.patch.yaml`),
      ],
    ),
  );

  const byTool = (kind: string, s: ServiceSpec) => ({ kind, name: s.name });
  const methodsOf = (spec: ServiceSpec) => {
    const methods = slo.methods.filter((m) => m.tool === spec.name);
    if (methods.length === 0)
      throw new Error(`${spec.name}: no unary method with an SLO, so a release gate would judge nothing`);
    return methods;
  };
  // Both release paths send the smoke calls from Jobs: their identity and the policies that let them in.
  const smokeObjects = [smokeServiceAccount(), ...tools.flatMap(smokeNetworkPolicies)];
  const argo = join(COMPONENTS_DIR, "argo-rollouts");
  put(argo, "smoke-checks.yaml", smokeObjects);
  for (const spec of tools) {
    const methods = methodsOf(spec);
    put(argo, `${spec.name}.yaml`, [
      rollout(spec),
      previewService(spec),
      analysisTemplate(spec, methods, smokeCallOf(methods[0]!.method.parent)),
      metricsService(spec),
    ]);
    put(argo, `${spec.name}.deployment.patch.yaml`, rolloutTemplatePatch(spec));
    put(argo, `${spec.name}.hpa.patch.yaml`, rolloutAutoscalerPatch(spec));
    put(argo, `${spec.name}.service-monitor.patch.yaml`, serviceMonitorPatch(spec, [ARGO_HASH_LABEL]));
  }
  put(
    argo,
    "kustomization.yaml",
    component(
      [...tools.map((s) => `${s.name}.yaml`), "smoke-checks.yaml"],
      tools.flatMap((s) => [
        { path: `${s.name}.deployment.patch.yaml`, target: byTool("Deployment", s) },
        { path: `${s.name}.hpa.patch.yaml`, target: byTool("HorizontalPodAutoscaler", s) },
        { path: `${s.name}.service-monitor.patch.yaml`, target: byTool("ServiceMonitor", s) },
      ]),
      tools.flatMap(smokeImageReplacements),
    ),
  );

  const plain = join(COMPONENTS_DIR, "plain-blue-green");
  put(plain, "smoke-checks.yaml", smokeObjects);
  for (const spec of tools) {
    put(plain, `${spec.name}.yaml`, [
      greenDeployment(spec),
      previewService(spec, { ...podSelector(spec), [COLOUR_LABEL]: "green" }),
      metricsService(spec),
    ]);
    // A JSON patch: one document holding the list of operations.
    files.set(join(plain, `${spec.name}.blue.patch.yaml`), toYaml(blueDeploymentPatch(spec), GENERATED_HEADER));
    put(plain, `${spec.name}.service.patch.yaml`, activeServicePatch(spec, "blue"));
    put(plain, `${spec.name}.service-monitor.patch.yaml`, serviceMonitorPatch(spec, [COLOUR_LABEL, RELEASE_LABEL]));
  }
  put(
    plain,
    "kustomization.yaml",
    component(
      [...tools.map((s) => `${s.name}.yaml`), "smoke-checks.yaml"],
      tools.flatMap((s) => [
        { path: `${s.name}.blue.patch.yaml`, target: byTool("Deployment", s) },
        { path: `${s.name}.service.patch.yaml`, target: byTool("Service", s) },
        { path: `${s.name}.service-monitor.patch.yaml`, target: byTool("ServiceMonitor", s) },
      ]),
      tools.flatMap(greenReplacements),
    ),
  );

  const chaos = join(COMPONENTS_DIR, "chaos-drills");
  for (const spec of services) put(chaos, `${spec.name}.pod-kill.yaml`, shippedPodKills(spec));
  put(chaos, "drill-runner.rbac.yaml", drillRunnerRbac());
  put(chaos, "drill-runner.job.yaml", drillRunnerTemplate(services));
  put(chaos, "drill-runner.network-policy.yaml", drillRunnerNetworkPolicies(services));
  put(
    chaos,
    "kustomization.yaml",
    component(
      [
        ...perService("pod-kill"),
        "drill-runner.rbac.yaml",
        "drill-runner.job.yaml",
        "drill-runner.network-policy.yaml",
      ],
      [],
      drillRunnerImageReplacements(),
    ),
  );
  return files;
}

/** The patrol component (patrol-objects.ts): its ServiceAccount, CronJob and NetworkPolicy, and the golden set `goldenSet` (the file's text). */
export function renderPatrolFiles(services: readonly ServiceSpec[], goldenSet: string): Map<string, string> {
  const dir = join(COMPONENTS_DIR, "patrol");
  const files = new Map<string, string>([
    [join(dir, "patrol.serviceaccount.yaml"), toYaml(patrolServiceAccount(), GENERATED_HEADER)],
    [join(dir, "patrol.cronjob.yaml"), toYaml(patrolCronJob(services), GENERATED_HEADER)],
    [join(dir, "patrol.network-policy.yaml"), toYaml(patrolNetworkPolicy(services), GENERATED_HEADER)],
    [join(dir, "golden-set.config-map.yaml"), toYaml(patrolGoldenSet(goldenSet), GENERATED_HEADER)],
  ]);
  const resources = [...files.keys()].map((path) => path.slice(dir.length + 1));
  files.set(
    join(dir, "kustomization.yaml"),
    toYaml(component(resources, [], patrolImageReplacements(services)), GENERATED_HEADER),
  );
  return files;
}
