// One drill, wherever it runs (local.ts: the local containers; k8s.ts: a cluster, from inside it):
// the scenario's fault plan (plan.ts) run by plan-run.ts beside the load (load.ts), with the plan's
// side-effects check (money.ts) before and after, and what the run collected for the report.
import { createRawClient, mintToken, type PersonRole, type RawClient, type ServiceSpec } from "@loopguard/tool-sdk";
import { ToolRegistry } from "@loopguard/orchestrator/tool-registry";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { elapsed, SessionLoad } from "./load.js";
import { breakerTransitions, growth, MetricsSampler, type PageReader, toolCallFigures } from "./metrics.js";
import type { DrillOptions } from "./options.js";
import { orchestratorApi, retryTransient } from "./orchestrator-api.js";
import type { DrillPeople } from "./people.js";
import { contractOf, type FaultProfile, planOf } from "./plan.js";
import type { CheckContext } from "./side-effects-check.js";
import { type DrillPod, type Place, runPlan } from "./plan-run.js";
import type { Collected } from "./report-files.js";
import type { ToolFigures } from "./report.js";
import { planSessions, SESSION_SCOPES } from "./session-plan.js";

/** What a drill needs to know of a service wherever it runs: its name and kind (a cluster's runner has no workspace to read manifests from). */
export type DrillService = Pick<ServiceSpec, "name" | "kind">;

export interface RunContext<S extends DrillService = DrillService> {
  readonly root: string;
  /** Where reports are written, one folder per run. */
  readonly reportsDir: string;
  readonly services: readonly S[];
  readonly progress: (line: string) => void;
  readonly signal: AbortSignal;
}

/** What a drill needs of where it runs: the local containers, or a cluster through the Kubernetes API. */
export interface DrillCluster extends Place {
  /** The orchestrator's API as a gRPC target naming every replica (`ipv4:a,b` or a headless Service's `dns:///…`), balanced per call. */
  readonly orchestratorApi: string;
  /** Every orchestrator replica's Prometheus page, by pod name. */
  readonly orchestratorMetrics: PageReader;
  /** A service's API as a gRPC target over every pod of its live set (a release moves it). */
  serviceApi(service: string): string;
  /** Every tool's pods whose ToolAdminService the runner reaches (latency, errors and the backend latency); empty on a cluster. */
  readonly toolPods: ReadonlyMap<string, readonly DrillPod[]>;
  /** The people the drill acts as: sessions started by the requester, approvals answered by the approver, audits and faults by the operator. */
  readonly people: DrillPeople;
  /** Replicas per service, for the report. */
  readonly replicas: Readonly<Record<string, number>>;
  /** The ToolAdminService address of one of `toolPods`. */
  adminAddress(tool: string, pod: DrillPod): string;
}

/** A name for the run's report folder: scenario, target, start time. */
export function runIdOf(options: DrillOptions, startedAt: Date): string {
  return `${options.scenario}-${options.tool}-${startedAt.toISOString().replace(/[-:]/g, "").replace(/\..*/, "")}`;
}

/** The scenario's plan run on `cluster` under load, and what the report is computed from. */
export async function drive(
  options: DrillOptions,
  ctx: RunContext,
  cluster: DrillCluster,
  runId: string,
  closers: (() => void)[],
): Promise<Collected> {
  const tools = ctx.services.filter((s) => s.kind === "tool").map((s) => s.name);
  const orchestratorName = ctx.services.find((s) => s.kind === "orchestrator")!.name;
  const plan = planOf(options, tools[0]!);
  const token = (person: PersonRole, audience: string, scopes: string[]) =>
    mintToken(cluster.people[person].key, {
      subject: cluster.people[person].binding.subject,
      audience,
      scopes,
      ttlSeconds: 3600,
    });
  const orchestratorAs = async (person: PersonRole, scopes: string[]) => {
    const api = orchestratorApi(cluster.orchestratorApi, await token(person, orchestratorName, scopes));
    closers.push(() => api.close());
    return api;
  };
  const requester = await orchestratorAs("requester", [
    "sessions:read",
    "sessions:write",
    ...SESSION_SCOPES.map((s) => `grant:${s}`),
  ]);
  const sessions = planSessions(options.sessions, options.refundShare, runId.toLowerCase().replace(/[^a-z0-9-]/g, ""));
  const checkContext: CheckContext = { sessions, serviceApi: (s) => cluster.serviceApi(s), token, orchestratorAs };
  const sideEffects = await plan.sideEffects(checkContext);
  await sideEffects.begin();

  const notes: string[] = [];
  const admins = new Map<string, RawClient<typeof ToolAdminService>>();
  closers.push(() => {
    for (const c of admins.values()) c.close();
  });
  for (const [tool, pods] of cluster.toolPods) {
    const admin = await token("operator", tool, ["tool:admin"]);
    for (const pod of pods)
      admins.set(pod.name, createRawClient(ToolAdminService, cluster.adminAddress(tool, pod), { token: admin }));
  }
  const setFaults = async (pods: readonly DrillPod[], profile: FaultProfile) => {
    await Promise.all(
      pods.map((p) => retryTransient(() => admins.get(p.name)!.setFaults({ profile }, { deadline: 5000 }))),
    );
  };
  for (const pods of cluster.toolPods.values()) await setFaults(pods, plan.baseline);
  if (options.backendLatencyMs > 0) {
    notes.push(
      cluster.toolPods.size > 0
        ? `every tool answered ${options.backendLatencyMs} ms later than it could (--backend-latency), standing in for its backend`
        : "backend latency: the cluster's own",
    );
  }
  const sampler = new MetricsSampler(cluster.orchestratorMetrics);
  const first = await sampler.sample();
  const load = new SessionLoad(requester, sessions, {
    pace: plan.pace,
    spreadMs: options.durationS * 1000,
    budgetMs: plan.budgetMs,
    progress: ctx.progress,
    signal: ctx.signal,
  });
  const timeline = await runPlan({
    plan,
    place: cluster,
    load,
    sampler,
    first,
    sideEffects,
    setFaults: cluster.toolPods.has(plan.target.service) ? setFaults : undefined,
    progress: ctx.progress,
    signal: ctx.signal,
  });

  const last = await sampler.sample();
  ctx.progress(`[${elapsed(timeline.t0)}] collecting: every session, its step records, the ledger`);
  const outcomes = await load.outcomes();
  const toolFigures: Record<string, ToolFigures> = {};
  for (const tool of tools) {
    const names = new ToolRegistry([contractOf(tool)]).list().map((t) => t.name);
    const figures = toolCallFigures(first, last, tool, contractOf(tool).typeName, names);
    toolFigures[tool] = { ...figures, breakerTransitions: breakerTransitions(first, last, tool) };
  }
  return {
    options,
    outcomes,
    audit: await sideEffects.end(outcomes),
    tools: toolFigures,
    deadWindows: timeline.deadWindows,
    faults: timeline.faults,
    approvalsResolved: sideEffects.approvalsResolved,
    parks: growth(first, last, "loopguard_session_transitions_total", { to: "PARKED" }),
    boundMs: plan.boundMs,
    containers: cluster.replicas,
    notes: [...notes, ...timeline.notes],
  };
}
