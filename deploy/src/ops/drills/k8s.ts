// A drill on a cluster, run inside it by the drill-runner Job (`pnpm drill … --k8s` creates the
// Job, k8s-launch.ts): the same load, report and audit as on the local containers, with the
// faults made by Chaos Mesh PodChaos objects (its controller kills the pods; their Deployment
// replaces them). The runner reaches the orchestrator and billing through their headless
// Services (every ready pod, balanced per call, so a killed orchestrator costs it one connection,
// not the run), reads every orchestrator replica's metrics (each pod's page, found through the
// Service's EndpointSlices, or a Prometheus), and signs its tokens with the people's keys mounted
// from a Secret.
import { setTimeout as sleep } from "node:timers/promises";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { DrillKube } from "./cluster-api.js";
import { MetricsSampler, prometheusPages, podPages } from "./metrics.js";
import type { DrillOptions } from "./options.js";
import { drillPeople } from "./people.js";
import { FLAP_DOWN_MS, FLAP_UP_MS } from "./plan.js";
import { type PodChaos, podKill } from "../../manifests/pod-chaos-objects.js";
import { DrillError } from "./drill-error.js";
import { type DrillResult, writeReport } from "./report-files.js";
import { type DrillCluster, type DrillService, drive, type RunContext, runIdOf } from "./run.js";

/** A service as the runner's Job knows it (LOOPGUARD_DRILL_SERVICES, rendered from the manifests). */
export type ClusterService = DrillService & Pick<ServiceSpec, "port">;

/** The port name of every Service's metrics page (k8s-objects.ts). */
const METRICS_PORT_NAME = "http";
const RECOVERY_TIMEOUT_MS = 120_000;

/** Every PodChaos object the run would create, in order (a flap: one per kill). */
export function podChaosPlan(options: DrillOptions, runId: string, namespace?: string): PodChaos[] {
  const name = runId
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "")
    .slice(0, 48);
  const labels = { "loopguard/drill-run": name };
  const cycles =
    options.scenario === "flap" ? Math.max(1, Math.ceil((options.durationS * 1000) / (FLAP_DOWN_MS + FLAP_UP_MS))) : 1;
  return Array.from({ length: cycles }, (_, i) =>
    podKill(options.tool, { mode: options.kill, name: `drill-${name}-${i + 1}`, labels, namespace }),
  );
}

/** LOOPGUARD_DRILL_SERVICES: the JSON list of {name, kind, port} the Job template carries. */
export function clusterServices(raw: string | undefined): ClusterService[] {
  const parsed = JSON.parse(raw ?? "[]") as ClusterService[];
  if (
    !Array.isArray(parsed) ||
    !parsed.some((s) => s.kind === "orchestrator") ||
    !parsed.some((s) => s.name === "billing")
  ) {
    throw new DrillError(
      "LOOPGUARD_DRILL_SERVICES must list the services (an orchestrator and billing among them) as [{name, kind, port}]",
    );
  }
  return parsed;
}

export interface ClusterRun {
  readonly kube: DrillKube;
  readonly namespace: string;
  /** The gRPC target of a service: its headless Service's name in the runner's namespace. */
  readonly targetOf?: (service: ClusterService) => string;
}

export async function runClusterDrill(
  options: DrillOptions,
  ctx: RunContext<ClusterService>,
  run: ClusterRun,
): Promise<DrillResult> {
  const startedAt = new Date();
  const clock = performance.now();
  const cpu = process.cpuUsage();
  const runId = runIdOf(options, startedAt);
  const { kube, namespace } = run;
  const targetOf = run.targetOf ?? ((s: ClusterService) => `dns:///${s.name}:${s.port}`);
  const orchestrator = ctx.services.find((s) => s.kind === "orchestrator")!;
  let targets: string[];
  try {
    targets = await kube.readyPods(options.tool);
  } catch (error) {
    throw new DrillError(`the Kubernetes API does not answer the runner (${(error as Error).message.split("\n")[0]})`);
  }
  if (targets.length < 2)
    throw new DrillError(
      `${options.scenario} needs at least 2 ready ${options.tool} pods in namespace ${namespace}; the cluster has ${targets.length}`,
    );
  const plan = podChaosPlan(options, runId, namespace);
  const created: string[] = [];
  const closers: (() => void)[] = [];
  const metrics = options.prometheus
    ? prometheusPages(options.prometheus, namespace, orchestrator.name)
    : podPages(() => kube.metricsUrls(orchestrator.name, METRICS_PORT_NAME));
  const cluster: DrillCluster = {
    orchestratorApi: targetOf(orchestrator),
    orchestratorMetrics: metrics,
    serviceApi: (service) => targetOf(ctx.services.find((s) => s.name === service)!),
    targets: targets.map((name) => ({ name })),
    toolPods: new Map(),
    people: drillPeople(process.env),
    replicas: { [options.tool]: targets.length },
    adminAddress: () => {
      throw new DrillError("the runner sets no faults in a cluster's pods");
    },
    async kill() {
      const body = plan[created.length];
      if (!body) throw new DrillError("the run wanted more kills than it planned");
      await kube.createPodChaos(body);
      created.push(body.metadata.name);
      return `PodChaos ${body.metadata.name}: pod-kill of ${body.spec.mode === "all" ? "every" : "one"} ${options.tool} pod (${targets.length} ready)`;
    },
    blueGreen() {
      throw new DrillError("release on a cluster is `pnpm release … --k8s`");
    },
    async recover() {
      const deadline = Date.now() + RECOVERY_TIMEOUT_MS;
      while ((await kube.readyPods(options.tool)).length < targets.length) {
        if (Date.now() > deadline)
          throw new DrillError(
            `${options.tool} did not get ${targets.length} ready pods back within ${RECOVERY_TIMEOUT_MS / 1000} s`,
          );
        await sleep(1000);
      }
    },
  };
  // Fails here, before any session starts, when a replica's figures cannot be read (or Prometheus has none).
  await new MetricsSampler(metrics).sample();
  try {
    const collected = await drive(options, ctx, cluster, runId, closers);
    const source = options.prometheus
      ? `figures summed over every orchestrator replica Prometheus (${options.prometheus}) scraped, as of its last scrape`
      : "figures summed over every orchestrator replica's own page, found through the EndpointSlices of its Service";
    return writeReport(
      ctx.reportsDir,
      runId,
      startedAt,
      {
        ...collected,
        notes: [
          ...collected.notes,
          `on a cluster the killed pods are replaced by their Deployment (an orchestrator too); ${source}`,
        ],
      },
      clock,
      cpu,
    );
  } finally {
    for (const close of closers) close();
    for (const name of created) await kube.deletePodChaos(name).catch(() => undefined);
  }
}
