// One drill on the local containers: start the container set the scenario needs, drive it
// (run.ts), write the report, and remove the containers — also when the run fails or is
// interrupted. Kept apart from run.ts so the cluster's runner image carries no Docker code.
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { activePods, type Pod } from "../../local/suite/state.js";
import { ContainerSuite } from "../../local/suite.js";
import { requireNoOtherSuite } from "../../local/suite/others.js";
import { release, rollback } from "../release/index.js";
import type { DrillOptions } from "./options.js";
import { podPages } from "./metrics.js";
import { drillPeople } from "./people.js";
import { type DrillResult, writeReport } from "./report-files.js";
import { type DrillCluster, drive, type RunContext, runIdOf } from "./run.js";

/** The container set a scenario needs: its target with `replicas` (an orchestrator drill: two on PostgreSQL), everything else one. */
export function replicasFor(options: DrillOptions): Map<string, number> {
  return new Map([[options.tool, options.replicas]]);
}

function localCluster(
  root: string,
  services: readonly ServiceSpec[],
  suite: ContainerSuite,
  pods: readonly Pod[],
  suiteDir: string,
  target: string,
): DrillCluster {
  const specOf = (service: string) => services.find((s) => s.name === service)!;
  const podsOf = (service: string) => pods.filter((p) => p.service === service).sort((a, b) => a.index - b.index);
  const orchestrator = services.find((s) => s.kind === "orchestrator")!;
  const byName = new Map(pods.map((p) => [p.name, p]));
  return {
    orchestratorApi: `ipv4:${podsOf(orchestrator.name)
      .map((p) => `${p.address}:${orchestrator.port}`)
      .join(",")}`,
    orchestratorMetrics: podPages(
      () =>
        new Map(
          podsOf(orchestrator.name).map((p) => [p.name, `http://${p.address}:${orchestrator.metricsPort}/metrics`]),
        ),
    ),
    serviceApi: (service) =>
      `ipv4:${activePods(suite.readState()!, service)
        .map((p) => `${p.address}:${specOf(service).port}`)
        .join(",")}`,
    targets: podsOf(target),
    toolPods: new Map(services.filter((s) => s.kind === "tool").map((s) => [s.name, podsOf(s.name)])),
    people: drillPeople({ LOOPGUARD_DATA_DIR: suiteDir }),
    replicas: Object.fromEntries(services.map((s) => [s.name, podsOf(s.name).length])),
    adminAddress: (tool, pod) => `${byName.get(pod.name)!.address}:${specOf(tool).port}`,
    async kill(victims) {
      await Promise.all(victims.map((p) => suite.kill(byName.get(p.name)!)));
      return `SIGKILL ${victims.map((p) => p.name).join(", ")} (${victims.length} of ${podsOf(target).length} ${target} pods)`;
    },
    async recover(victims) {
      await Promise.all(victims.map((p) => suite.restart(byName.get(p.name)!)));
    },
    blueGreen(kind, to, log) {
      const options = { tool: target, root, dataDir: suiteDir, log };
      return kind === "release" ? release({ ...options, to: to! }) : rollback(options);
    },
  };
}

/**
 * What the drill's containers need beyond `pnpm start`'s environment: one requester starts every
 * session at once, so its orchestrators let one caller have that many in flight.
 */
export function drillEnv(
  options: Pick<DrillOptions, "sessions">,
  spec: Pick<ServiceSpec, "kind">,
): Record<string, string> {
  return spec.kind === "orchestrator" ? { ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(options.sessions) } : {};
}

export async function runLocalDrill(options: DrillOptions, ctx: RunContext<ServiceSpec>): Promise<DrillResult> {
  const startedAt = new Date();
  const clock = performance.now();
  const cpu = process.cpuUsage();
  const runId = runIdOf(options, startedAt);
  await requireNoOtherSuite();
  const suiteDir = mkdtempSync(join(tmpdir(), "loopguard-drill-"));
  // PostgreSQL (run as its own user when the runner is root) must reach its folder inside.
  chmodSync(suiteDir, 0o755);
  const suite = new ContainerSuite({
    root: ctx.root,
    dataDir: suiteDir,
    services: ctx.services,
    log: (line) => ctx.progress(line),
    envFor: (spec) => drillEnv(options, spec),
  });
  const closers: (() => void)[] = [];
  try {
    ctx.progress(
      `starting the containers: ${options.tool} × ${options.replicas}, every other service × 1 (images tagged ${options.tag})`,
    );
    const state = await suite.up({ replicas: replicasFor(options), tag: options.tag });
    if (ctx.signal.aborted) throw ctx.signal.reason;
    const result = await drive(
      options,
      ctx,
      localCluster(ctx.root, ctx.services, suite, state.pods, suiteDir, options.tool),
      runId,
      closers,
    );
    return writeReport(ctx.reportsDir, runId, startedAt, result, clock, cpu);
  } finally {
    for (const close of closers) close();
    ctx.progress("removing the drill's containers");
    await suite
      .down()
      .catch((error: unknown) => ctx.progress(`could not remove every container: ${(error as Error).message}`));
    rmSync(suiteDir, { recursive: true, force: true });
  }
}
