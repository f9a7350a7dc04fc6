// A drill on a cluster (`--k8s`): the same load, report and audit as on the local containers,
// with the faults made by Chaos Mesh PodChaos objects created through the Kubernetes API (its
// controller kills the pods; their Deployment replaces them). The runner reaches the
// orchestrator and billing through `kubectl port-forward` on the addresses the README uses, and
// signs its tokens with LOOPGUARD_SIGNING_KEY_FILE (a key the cluster's JWKS trusts).
// `--dry-run` prints the objects a run would create, and creates nothing.
import { setTimeout as sleep } from "node:timers/promises";
import { CoreV1Api, CustomObjectsApi, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { NAMESPACE } from "../containers/cluster-dns.js";
import type { DrillOptions } from "./options.js";
import { type PodChaos, podKill } from "./pod-chaos.js";
import { drillPeople } from "./people.js";
import { type DrillCluster, type DrillPod, type DrillResult, DrillError, drive, FLAP_DOWN_MS, FLAP_UP_MS, type RunContext, runIdOf, writeReport } from "./run.js";

/** Where `kubectl -n loopguard port-forward svc/orchestrator 50051 8080` and `svc/billing 50062` put the services. */
export const PORT_FORWARDS = { orchestratorApi: "127.0.0.1:50051", orchestratorMetrics: "http://127.0.0.1:8080/metrics", billingApi: "127.0.0.1:50062" } as const;

const CHAOS = { group: "chaos-mesh.org", version: "v1alpha1", plural: "podchaos" } as const;
const RECOVERY_TIMEOUT_MS = 120_000;

/** Every PodChaos object the run would create, in order (a flap: one per kill). */
export function podChaosPlan(options: DrillOptions, runId: string): PodChaos[] {
  const name = runId
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "")
    .slice(0, 48);
  const labels = { "loopguard/drill-run": name };
  const cycles = options.scenario === "flap" ? Math.max(1, Math.ceil((options.durationS * 1000) / (FLAP_DOWN_MS + FLAP_UP_MS))) : 1;
  return Array.from({ length: cycles }, (_, i) => podKill(options.tool, { mode: options.kill, name: `drill-${name}-${i + 1}`, labels }));
}

function ready(pod: V1Pod): boolean {
  return !pod.metadata?.deletionTimestamp && (pod.status?.conditions ?? []).some((c) => c.type === "Ready" && c.status === "True");
}

export async function runK8sDrill(options: DrillOptions, ctx: RunContext): Promise<DrillResult> {
  const startedAt = new Date();
  const clock = performance.now();
  const cpu = process.cpuUsage();
  const runId = runIdOf(options, startedAt);
  const config = new KubeConfig();
  config.loadFromDefault();
  const core = config.makeApiClient(CoreV1Api);
  const custom = config.makeApiClient(CustomObjectsApi);
  const podsOf = async (service: string) => (await core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: `app.kubernetes.io/name=${service}` })).items.filter(ready);
  let targets: V1Pod[];
  try {
    targets = await podsOf(options.tool);
  } catch (error) {
    throw new DrillError(`the cluster of the current kubeconfig context does not answer (${(error as Error).message.split("\n")[0]})`);
  }
  if (targets.length < 2) throw new DrillError(`${options.scenario} needs at least 2 ready ${options.tool} pods in namespace ${NAMESPACE}; the cluster has ${targets.length}`);
  const plan = podChaosPlan(options, runId);
  const created: string[] = [];
  const closers: (() => void)[] = [];
  const cluster: DrillCluster = {
    orchestratorApi: [PORT_FORWARDS.orchestratorApi],
    orchestratorMetrics: new Map([["orchestrator (port-forward)", PORT_FORWARDS.orchestratorMetrics]]),
    billingApi: () => [PORT_FORWARDS.billingApi],
    targets: targets.map((p) => ({ name: p.metadata!.name! })),
    toolPods: new Map(),
    people: drillPeople(process.env),
    replicas: { [options.tool]: targets.length },
    adminAddress: () => {
      throw new DrillError("the runner sets no faults in a cluster's pods");
    },
    async kill(_victims: readonly DrillPod[]) {
      const body = plan[created.length];
      if (!body) throw new DrillError("the run wanted more kills than it planned");
      await custom.createNamespacedCustomObject({ ...CHAOS, namespace: NAMESPACE, body });
      created.push(body.metadata.name);
      return `PodChaos ${body.metadata.name}: pod-kill of ${body.spec.mode === "all" ? "every" : "one"} ${options.tool} pod (${targets.length} ready)`;
    },
    blueGreen() {
      throw new DrillError("release on a cluster is `pnpm release … --k8s`");
    },
    async recover() {
      const deadline = Date.now() + RECOVERY_TIMEOUT_MS;
      while ((await podsOf(options.tool)).length < targets.length) {
        if (Date.now() > deadline) throw new DrillError(`${options.tool} did not get ${targets.length} ready pods back within ${RECOVERY_TIMEOUT_MS / 1000} s`);
        await sleep(1000);
      }
    },
  };
  try {
    const collected = await drive(options, ctx, cluster, runId, closers);
    return writeReport(
      ctx,
      runId,
      startedAt,
      {
        ...collected,
        notes: [...collected.notes, "on a cluster the killed pods are replaced by their Deployment (an orchestrator too); figures come from the orchestrator behind the port-forward only"],
      },
      clock,
      cpu,
    );
  } finally {
    for (const close of closers) close();
    for (const name of created) await custom.deleteNamespacedCustomObject({ ...CHAOS, namespace: NAMESPACE, name }).catch(() => undefined);
  }
}
