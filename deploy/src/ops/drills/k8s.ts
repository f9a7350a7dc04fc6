// A drill on a cluster, run inside it by the drill-runner Job (`pnpm drill … --k8s` creates the
// Job, k8s-launch.ts): the same load, report and audit as on the local containers, with the
// faults made by Chaos Mesh PodChaos objects (its controller kills the pods; their Deployment
// replaces them). A kill counts once its pods are known dead (the PodChaos's status records them
// killed, or the runner has seen them die: gone, being deleted, or a container restarted): a
// PodChaos nothing acts on fails the drill rather than report a clean run over a kill that never
// happened. The runner reaches the orchestrator and billing through their
// headless Services (every ready pod, balanced per call, so a killed orchestrator costs it one
// connection, not the run), reads every orchestrator replica's metrics (each pod's page, found
// through the Service's EndpointSlices, or a Prometheus), and signs its tokens with the people's
// keys mounted from a Secret.
import { setTimeout as sleep } from "node:timers/promises";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { DrillKube, PodState } from "./cluster-api.js";
import { MetricsSampler, prometheusPages, podPages } from "./metrics.js";
import type { DrillOptions } from "./options.js";
import { drillPeople } from "./people.js";
import { FLAP_DOWN_MS, FLAP_UP_MS } from "./plan.js";
import { type KillMode, type PodChaos, podKill } from "../../manifests/pod-chaos-objects.js";
import { DrillError } from "./drill-error.js";
import { holdDrillLease } from "./drill-lease.js";
import { type DrillResult, writeReport } from "./report-files.js";
import { type DrillCluster, type DrillService, drive, type RunContext, runIdOf } from "./run.js";

/** A service as the runner's Job knows it (LOOPGUARD_DRILL_SERVICES, rendered from the manifests). */
export type ClusterService = DrillService & Pick<ServiceSpec, "port">;

/** The port name of every Service's metrics page (k8s-objects.ts). */
const METRICS_PORT_NAME = "http";
const RECOVERY_TIMEOUT_MS = 120_000;
/** How long a PodChaos may take to kill (Chaos Mesh acts within seconds) before the kill counts as not made. */
const KILL_SEEN_TIMEOUT_MS = 30_000;
const KILL_POLL_MS = 250;
/** The report's note when the runner's Role (one rendered before the runner read PodChaos status) may not read it. */
export const STATUS_UNREADABLE_NOTE = "the runner's Role cannot read PodChaos status; counted kills by re-listing pods";

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

/** Which of the pods `before` are dead now: gone, being deleted, or with a container restarted. */
function podsKilled(before: Iterable<PodState>, now: readonly PodState[]): PodState[] {
  const byUid = new Map(now.map((p) => [p.uid, p]));
  return [...before].filter((p) => {
    const after = byUid.get(p.uid);
    return !after || after.terminating || after.restarts > p.restarts;
  });
}

/**
 * The pods a kill follows through the runner's lists: those alive when it listed them before the
 * PodChaos, and every pod made since, as first seen (mode one may pick one an autoscaler made in
 * between; seen alive then gone, or first seen being deleted, it counts).
 */
function podWatch(listed: readonly PodState[]): {
  readonly followed: Map<string, PodState>;
  dead(now: readonly PodState[]): PodState[];
} {
  const known = new Set(listed.map((p) => p.uid));
  const followed = new Map(listed.filter((p) => !p.terminating).map((p) => [p.uid, p]));
  return {
    followed,
    dead(now) {
      for (const pod of now) if (!known.has(pod.uid) && !followed.has(pod.uid)) followed.set(pod.uid, pod);
      return podsKilled(followed.values(), now);
    },
  };
}

/**
 * The run's kills, one PodChaos each in the order of `plan`. A kill resolves with what it did once
 * its pods are known dead — one pod (mode one), every pod there was (mode all) — and fails the drill
 * with DrillError when that is not known within the timeout, naming the pods that lived on. Which
 * pods died: the PodChaos's status first (the pods Chaos Mesh records it killed, even one made after
 * the runner's list and gone before its next look), and as the fallback, for what the status does
 * not name (not written yet), the pods the runner's re-lists see die. A Role that may not read the status (rendered
 * by an older release) leaves the re-lists alone to count, for the rest of the drill, which `notes` says.
 * `created` names every PodChaos made, for the run's end to delete.
 */
export function podChaosKills(
  kube: DrillKube,
  plan: readonly PodChaos[],
  options: { readonly timeoutMs?: number; readonly pollMs?: number } = {},
): { readonly created: readonly string[]; readonly notes: readonly string[]; kill(): Promise<string> } {
  const { timeoutMs = KILL_SEEN_TIMEOUT_MS, pollMs = KILL_POLL_MS } = options;
  const created: string[] = [];
  const notes: string[] = [];
  let statusReadable = true;
  /** What PodChaos `name`'s status names killed; once refused, not asked again (every poll would be refused too). */
  const killedPerStatus = async (name: string): Promise<string[]> => {
    if (!statusReadable) return [];
    const named = await kube.podChaosKilled(name);
    if (named) return named;
    statusReadable = false;
    notes.push(STATUS_UNREADABLE_NOTE);
    return [];
  };
  return {
    created,
    notes,
    async kill() {
      const chaos = plan[created.length];
      if (!chaos) throw new DrillError("the run wanted more kills than it planned");
      const { name, namespace } = chaos.metadata;
      const tool = chaos.spec.selector.labelSelectors["app.kubernetes.io/name"]!;
      const mode: KillMode = chaos.spec.mode;
      const listed = await kube.pods(tool);
      const before = listed.filter((p) => !p.terminating);
      const watch = podWatch(listed);
      // Named before it exists: the run's end deletes it even when its kill is never seen.
      created.push(name);
      await kube.createPodChaos(chaos);
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const byStatus = await killedPerStatus(name);
        const seen = watch.dead(await kube.pods(tool)).filter((p) => !byStatus.includes(p.name));
        const killed = new Set([...byStatus, ...seen.map((p) => p.name)]);
        if (killed.size > 0 && (mode === "one" || before.every((p) => killed.has(p.name)))) {
          const what = [
            ...(byStatus.length > 0 ? [`killed per its status: ${byStatus.join(", ")}`] : []),
            ...(seen.length > 0 ? [`seen dead: ${seen.map((p) => p.name).join(", ")}`] : []),
          ];
          return `PodChaos ${name}: pod-kill of ${mode === "all" ? "every" : "one"} ${tool} pod (${before.filter((p) => p.ready).length} ready); ${what.join("; ")}`;
        }
        if (Date.now() >= deadline) {
          const alive = (mode === "all" ? before : [...watch.followed.values()]).filter((p) => !killed.has(p.name));
          throw new DrillError(
            `PodChaos ${name} was created but ${mode === "all" ? `${alive.length} of the ${before.length} ${tool} pods did not die` : `none of the ${alive.length} ${tool} pods died`} within ${timeoutMs / 1000} s ` +
              `(${alive.map((p) => p.name).join(", ")} kept their uid and restart count, and its status records no kill of them): the kill did not happen, so the drill has nothing to report. ` +
              `Is Chaos Mesh's controller running, and does it act in namespace ${namespace}? \`kubectl -n ${namespace} describe podchaos ${name}\` says why`,
          );
        }
        await sleep(pollMs);
      }
    },
  };
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
  const readyPods = async () => (await kube.pods(options.tool)).filter((p) => p.ready).map((p) => p.name);
  let targets: string[];
  try {
    targets = await readyPods();
  } catch (error) {
    throw new DrillError(`the Kubernetes API does not answer the runner (${(error as Error).message.split("\n")[0]})`);
  }
  if (targets.length < 2)
    throw new DrillError(
      `${options.scenario} needs at least 2 ready ${options.tool} pods in namespace ${namespace}; the cluster has ${targets.length}`,
    );
  const kills = podChaosKills(kube, podChaosPlan(options, runId, namespace));
  const closers: (() => void)[] = [];
  const metrics = options.prometheus
    ? prometheusPages(options.prometheus, namespace, orchestrator.name)
    : podPages(() => kube.metricsUrls(orchestrator.name, METRICS_PORT_NAME));
  // Refused here, before anything is made, while another drill runs on the cluster.
  const lease = await holdDrillLease(kube, runId, namespace, { progress: ctx.progress, signal: ctx.signal });
  try {
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
      kill: () => kills.kill(),
      blueGreen() {
        throw new DrillError("release on a cluster is `pnpm release … --k8s`");
      },
      async recover() {
        const deadline = Date.now() + RECOVERY_TIMEOUT_MS;
        while ((await readyPods()).length < targets.length) {
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
    const signal = AbortSignal.any([ctx.signal, lease.lost]);
    const collected = await drive(options, { ...ctx, signal }, cluster, runId, closers);
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
          ...kills.notes,
          `on a cluster the killed pods are replaced by their Deployment (an orchestrator too); ${source}`,
        ],
      },
      clock,
      cpu,
    );
  } finally {
    for (const close of closers) close();
    for (const name of kills.created) await kube.deletePodChaos(name).catch(() => undefined);
    // Not released when the API does not answer: it lapses a minute after its last renewal (drill-lease.ts).
    await lease.release().catch(() => undefined);
  }
}
