// One drill, wherever it runs (local.ts: the local containers; k8s.ts: a cluster, from inside it):
// start every session at once, inject the fault (every pod of a tool killed: at once; a tool's other
// faults: once it has been offered calls numbering a tenth of the sessions; the orchestrator: a tenth
// of them ended), hold it, undo it, wait for every session to end (or the bound to pass), audit the
// ledger, and write the report.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { DescService, MessageInitShape } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { type FaultProfileSchema, ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import {
  createRawClient,
  methodPolicy,
  mintToken,
  type PersonRole,
  type RawClient,
  servicePolicy,
  servicesOf,
  type ServiceSpec,
} from "@loopguard/tool-sdk";
import type { DrillPeople } from "./people.js";
import { breakerTransitions, growth, MetricsSampler, type PageReader, toolCallFigures } from "./metrics.js";
import type { DrillOptions } from "./options.js";
import type { KillMode } from "../manifests/pod-chaos-objects.js";
import {
  auditSideEffects,
  computeReport,
  type DeadWindow,
  type DrillReport,
  type FaultEvent,
  type LedgerRefund,
  renderMarkdown,
  type SessionOutcome,
  type ToolFigures,
  traceFacts,
} from "./report.js";
import {
  Approver,
  isTerminal,
  listAll,
  orchestratorApi,
  retryTransient,
  SESSION_SCOPES,
  type SessionView,
  startAll,
  tracesOf,
} from "./session-load.js";
import { type PlannedSession, planSessions } from "./session-plan.js";
import type { ReleaseResult } from "../release/index.js";

/** A run that could not be made (no Docker, images missing, another suite up): one line, exit 1. */
export class DrillError extends Error {
  override readonly name = "DrillError";
}

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

export interface DrillResult {
  readonly runId: string;
  readonly startedAt: Date;
  readonly report: DrillReport;
  readonly markdownPath: string;
  readonly jsonPath: string;
}

/** A pod the drill may kill, by name. */
export interface DrillPod {
  readonly name: string;
}

/** What a drill needs of where it runs: the local containers, or a cluster through the Kubernetes API. */
export interface DrillCluster {
  /** The orchestrator's API as a gRPC target naming every replica (`ipv4:a,b` or a headless Service's `dns:///…`), balanced per call. */
  readonly orchestratorApi: string;
  /** Every orchestrator replica's Prometheus page, by pod name. */
  readonly orchestratorMetrics: PageReader;
  /** Billing's API as a gRPC target over every pod of its live set (a release moves it). */
  billingApi(): string;
  /** Pods of the service the drill is aimed at. */
  readonly targets: readonly DrillPod[];
  /** Every tool's pods whose ToolAdminService the runner reaches (latency, errors and the backend latency); empty on a cluster. */
  readonly toolPods: ReadonlyMap<string, readonly DrillPod[]>;
  /** The people the drill acts as: sessions started by the requester, approvals answered by the approver, ledger audits and faults by the operator. */
  readonly people: DrillPeople;
  /** Replicas per service, for the report. */
  readonly replicas: Readonly<Record<string, number>>;
  /** The ToolAdminService address of one of `toolPods`. */
  adminAddress(tool: string, pod: DrillPod): string;
  /** SIGKILLs the pods; says what was done. */
  kill(victims: readonly DrillPod[], mode: KillMode): Promise<string>;
  /** Brings the killed pods back (restarts them; on a cluster, waits for the replacements) and resolves once they serve. */
  recover(victims: readonly DrillPod[]): Promise<void>;
  /** A blue-green release of the target to an image tag, or a rollback to the set live before (`pnpm release`'s API). */
  blueGreen(kind: "release" | "rollback", to: string | undefined, log: (line: string) => void): Promise<ReleaseResult>;
}

/**
 * The fault starts once the load is under way: the orchestrator's once this share of the sessions
 * has ended; a tool's (but a kill of every pod, at once) once the sessions have offered it calls
 * numbering this share of them.
 */
const TRIGGER_SHARE = 0.1;
const TRIGGER_TIMEOUT_MS = 20_000;
const TRIGGER_POLL_MS = 100;
/** A session's wall clock beyond the fault; the run's bound is that plus a margin, so no healthy session counts as hung. */
const SESSION_BUDGET_EXTRA_MS = 60_000;
const BOUND_MARGIN_MS = 30_000;
/** A flap: down this long, then up this long (after SERVING), over and over. */
export const FLAP_DOWN_MS = 2000;
export const FLAP_UP_MS = 3000;

/** The contract service of a tool, by its tool name. */
export function contractOf(tool: string): DescService {
  const service = servicesOf(contractFiles).find((s) => servicePolicy(s).toolName === tool);
  if (!service) throw new DrillError(`no contract names the tool "${tool}"`);
  return service;
}

function elapsed(t0: number): string {
  return `${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s`;
}

/** Writes a report, Markdown and JSON, in the run's own folder under `reportsDir`. */
export function writeReportFiles(
  reportsDir: string,
  runId: string,
  report: DrillReport,
  startedAt: Date,
): { dir: string; markdownPath: string; jsonPath: string } {
  const dir = join(reportsDir, runId);
  mkdirSync(dir, { recursive: true });
  const markdownPath = join(dir, "report.md");
  const jsonPath = join(dir, "report.json");
  writeFileSync(markdownPath, renderMarkdown(report, startedAt));
  writeFileSync(jsonPath, `${JSON.stringify(report, null, 2)}\n`);
  return { dir, markdownPath, jsonPath };
}

/** Computes the report of what a run collected and writes it, Markdown and JSON, in a folder of its own. */
export function writeReport(
  ctx: RunContext,
  runId: string,
  startedAt: Date,
  collected: Collected,
  clock: number,
  cpu: NodeJS.CpuUsage,
): DrillResult {
  const used = process.cpuUsage(cpu);
  const report = computeReport({
    ...collected,
    runtimeMs: performance.now() - clock,
    runnerCpuMs: (used.user + used.system) / 1000,
  });
  const { dir, markdownPath, jsonPath } = writeReportFiles(ctx.reportsDir, runId, report, startedAt);
  // Every session's own line, for whoever wants to look at one of them.
  const sessions = collected.outcomes.map((o, index) =>
    JSON.stringify({
      index,
      kind: o.kind,
      needs_approval: o.needsApproval,
      session_id: o.sessionId ?? null,
      state: o.state ?? "MISSING",
      stop_reason: o.stopReason,
      outcome: o.outcome,
      outcome_reason: o.outcomeReason,
      duration_ms: o.durationMs ?? null,
      served_from: o.trace?.servedFrom ?? [],
      refund_ids: o.trace?.refundIds ?? [],
      answer: o.answer,
    }),
  );
  writeFileSync(join(dir, "sessions.jsonl"), `${sessions.join("\n")}\n`);
  return { runId, startedAt, report, markdownPath, jsonPath };
}

/** A name for the run's report folder: scenario, target, start time. */
export function runIdOf(options: DrillOptions, startedAt: Date): string {
  return `${options.scenario}-${options.tool}-${startedAt.toISOString().replace(/[-:]/g, "").replace(/\..*/, "")}`;
}

export type Collected = Omit<Parameters<typeof computeReport>[0], "runtimeMs" | "runnerCpuMs">;

/** The load, the fault and the collection, wherever the drill runs. */
export async function drive(
  options: DrillOptions,
  ctx: RunContext,
  cluster: DrillCluster,
  runId: string,
  closers: (() => void)[],
): Promise<Collected> {
  const tools = ctx.services.filter((s) => s.kind === "tool").map((s) => s.name);
  const orchestratorName = ctx.services.find((s) => s.kind === "orchestrator")!.name;
  const ttlSeconds = 3600;
  const token = (person: PersonRole, audience: string, scopes: string[]) =>
    mintToken(cluster.people[person].key, {
      subject: cluster.people[person].binding.subject,
      audience,
      scopes,
      ttlSeconds,
    });
  const balanced = { "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }) };

  const requester = orchestratorApi(
    cluster.orchestratorApi,
    await token("requester", orchestratorName, [
      "sessions:read",
      "sessions:write",
      ...SESSION_SCOPES.map((s) => `grant:${s}`),
    ]),
  );
  const approverApi = orchestratorApi(
    cluster.orchestratorApi,
    await token("approver", orchestratorName, ["sessions:read", "approvals:write"]),
  );
  const auditor = await token("operator", "billing", ["billing:read"]);
  closers.push(
    () => requester.close(),
    () => approverApi.close(),
  );
  const sampler = new MetricsSampler(cluster.orchestratorMetrics);

  const plan = planSessions(options.sessions, options.refundShare, runId.toLowerCase().replace(/[^a-z0-9-]/g, ""));
  const orders = [...new Set(plan.flatMap((p) => (p.orderId ? [p.orderId] : [])))];
  // Billing's live set when the ledger is read: a release may have moved it.
  const readLedger = async (): Promise<LedgerRefund[]> => {
    const ledger = createRawClient(BillingService, cluster.billingApi(), { token: auditor, channelOptions: balanced });
    try {
      const pages = await Promise.all(
        orders.map(
          async (orderId) =>
            (await retryTransient.execute(() => ledger.listRefunds({ orderId }, { deadline: 5000 }))).refunds,
        ),
      );
      return pages
        .flat()
        .map((r) => ({ refundId: r.refundId, orderId: r.orderId, amountCents: Number(r.amountCents) }));
    } finally {
      ledger.close();
    }
  };
  const ledgerBefore = await readLedger();

  const faults: FaultEvent[] = [];
  const deadWindows: DeadWindow[] = [];
  const notes: string[] = [];
  // A release starts its sessions one by one over --duration (a steady load that spans both flips
  // and both drains); every other scenario starts them at once and its fault lasts --duration.
  const steady = options.scenario === "release";
  const budgetMs = steady ? SESSION_BUDGET_EXTRA_MS : options.durationS * 1000 + SESSION_BUDGET_EXTRA_MS;
  const boundMs = (steady ? options.durationS * 1000 : 0) + budgetMs + BOUND_MARGIN_MS;
  // Every tool answers after its backend's latency, so sessions overlap as they do in production
  // instead of finishing in a few milliseconds on loopback; a restarted pod gets it again.
  const baseline = options.backendLatencyMs > 0 ? { addedLatencyMs: options.backendLatencyMs } : {};
  const admins = new Map<string, RawClient<typeof ToolAdminService>>();
  for (const [tool, pods] of cluster.toolPods) {
    const admin = await token("operator", tool, ["tool:admin"]);
    for (const pod of pods)
      admins.set(pod.name, createRawClient(ToolAdminService, cluster.adminAddress(tool, pod), { token: admin }));
  }
  closers.push(() => {
    for (const c of admins.values()) c.close();
  });
  const setFaults = (pods: readonly DrillPod[], profile: MessageInitShape<typeof FaultProfileSchema>) =>
    Promise.all(
      pods.map((p) => retryTransient.execute(() => admins.get(p.name)!.setFaults({ profile }, { deadline: 5000 }))),
    );
  for (const pods of cluster.toolPods.values()) await setFaults(pods, baseline);
  if (options.backendLatencyMs > 0) {
    notes.push(
      cluster.toolPods.size > 0
        ? `every tool answered ${options.backendLatencyMs} ms later than it could (--backend-latency), standing in for its backend`
        : "backend latency: the cluster's own",
    );
  }
  const first = await sampler.sample();

  const approverStop = new AbortController();
  const approver = new Approver(approverApi);
  const approving = approver.run(approverStop.signal);
  const t0 = Date.now();
  const ids: (string | undefined)[] = plan.map(() => undefined);
  const started: string[] = [];
  /** When each session was asked for, for the sessions a release's flip and drain saw. */
  const startTimes: number[] = [];
  const startOne = async (p: PlannedSession) => {
    startTimes.push(Date.now());
    const [id] = await startAll(requester, [p], budgetMs);
    ids[p.index] = id;
    if (id) started.push(id);
  };
  const describe = (sessions: readonly PlannedSession[]) =>
    `${sessions.filter((p) => p.kind === "refund").length} refunds, ${sessions.filter((p) => p.needsApproval).length} of them for a high-risk customer`;
  const startLoad = async () => {
    const at = Date.now();
    if (steady) {
      const gapMs = (options.durationS * 1000) / plan.length;
      ctx.progress(
        `starting ${plan.length} sessions one every ${(gapMs / 1000).toFixed(2)} s over ${options.durationS} s (${describe(plan)})`,
      );
      const startInTurn = async (p: PlannedSession, i: number) => {
        // Ctrl-C: the sessions not yet started are not started.
        const due = await sleep(i * gapMs, true, { signal: ctx.signal }).catch(() => false);
        if (due) await startOne(p);
      };
      await Promise.all(plan.map(startInTurn));
    } else {
      ctx.progress(`starting ${plan.length} sessions at once (${describe(plan)})`);
      await Promise.all(plan.map(startOne));
    }
    ctx.progress(`${started.length} of ${plan.length} sessions started in ${((Date.now() - at) / 1000).toFixed(1)} s`);
  };
  // A tool's fault may start while the first wave is still being started: its calls come first
  // (every session asks kb-search before anything else).
  const toolFault = options.scenario !== "release" && options.scenario !== "kill-orchestrator";
  // Every pod of a tool dies just before the sessions start: the calls of a burst are over within a
  // second, so killing as they start raced them (at small sizes every call could be answered
  // before the pods died), and what is measured is how the sessions get through without it.
  const killsEveryPod = (options.scenario === "kill-tool" || options.scenario === "flap") && options.kill === "all";
  let podsDown = () => {};
  const firstKill = killsEveryPod ? new Promise<void>((resolveKill) => (podsDown = resolveKill)) : Promise.resolve();
  let loadStarted = false;
  const loading = firstKill.then(startLoad).then(() => {
    loadStarted = true;
  });
  loading.catch(() => undefined);
  if (!toolFault && !steady) await loading;

  // The watcher: the latest view of every session, polled through the API like a dashboard.
  let latest = new Map<string, SessionView>();
  let faultNow = "no fault yet";
  const ended = () => started.filter((id) => isTerminal(latest.get(id)?.state ?? "")).length;
  const watchStop = new AbortController();
  const watching = (async () => {
    let lastLine = 0;
    while (!watchStop.signal.aborted) {
      const views = await listAll(requester).catch(() => undefined);
      const wanted = new Set(started);
      if (views) latest = new Map(views.filter((v) => wanted.has(v.sessionId)).map((v) => [v.sessionId, v]));
      if (Date.now() - lastLine >= 2000) {
        lastLine = Date.now();
        const done = [...latest.values()].filter((v) => v.state === "DONE").length;
        const waiting = [...latest.values()].filter((v) => v.state === "AWAITING_APPROVAL").length;
        ctx.progress(
          `[${elapsed(t0)}] ${ended()}/${started.length} ended (done ${done}), ${waiting} awaiting approval; ${faultNow}`,
        );
      }
      await sleep(250, undefined, { signal: watchStop.signal }).catch(() => undefined);
    }
  })();
  const until = async (condition: () => boolean, timeoutMs: number): Promise<boolean> => {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      if (Date.now() >= deadline) return false;
      if (ctx.signal.aborted) throw ctx.signal.reason;
      await sleep(100);
    }
    return true;
  };
  const allEnded = () => loadStarted && ended() === started.length;
  const mark = (what: string) => {
    faults.push({ atMs: Date.now() - t0, what });
    faultNow = what;
    ctx.progress(`[${elapsed(t0)}] ${what}`);
  };

  try {
    const service = contractOf(options.tool === orchestratorName ? tools[0]! : options.tool);
    // A release needs no trigger: its sessions are started all through it.
    const trigger = Math.max(1, Math.ceil(plan.length * TRIGGER_SHARE));
    if (options.scenario === "kill-orchestrator") {
      if (!(await until(() => ended() >= trigger, TRIGGER_TIMEOUT_MS))) {
        notes.push(
          `the load had not ended ${trigger} sessions after ${TRIGGER_TIMEOUT_MS / 1000} s; the fault started anyway`,
        );
      }
    } else if (toolFault && !killsEveryPod) {
      // A tool's fault starts once its calls are under way: sessions call kb-search first, so
      // waiting for sessions to end would leave it no calls to fail.
      let offered = 0;
      const callsUnderWay = async () => {
        const deadline = Date.now() + TRIGGER_TIMEOUT_MS;
        while (Date.now() < deadline && !allEnded()) {
          offered = toolCallFigures(first, await sampler.sample(), options.tool, service.typeName).offered;
          if (offered >= trigger) return true;
          await sleep(TRIGGER_POLL_MS);
        }
        return false;
      };
      if (!(await callsUnderWay()))
        notes.push(
          `the sessions had offered ${offered} of ${trigger} calls to ${options.tool} after ${TRIGGER_TIMEOUT_MS / 1000} s; the fault started anyway`,
        );
    }
    const targets = cluster.targets;
    const hold = (ms: number) => until(allEnded, ms);

    /** Kills `victims`, holds, restarts them; a window in which the tool was dead when they were all its pods. */
    const killWindow = async (victims: readonly DrillPod[], downMs: number): Promise<void> => {
      const before = await sampler.sample();
      const from = Date.now() - t0;
      mark(await cluster.kill(victims, options.kill));
      podsDown();
      await hold(downMs);
      mark(`restarting ${victims.map((p) => p.name).join(", ")}`);
      await cluster.recover(victims);
      const after = await sampler.sample();
      if (cluster.toolPods.has(options.tool)) await setFaults(victims, baseline);
      faultNow = "no fault";
      ctx.progress(`[${elapsed(t0)}] ${victims.map((p) => p.name).join(", ")} SERVING again`);
      if (victims.length === targets.length) {
        const figures = toolCallFigures(before, after, options.tool, service.typeName);
        deadWindows.push({ fromMs: from, toMs: Date.now() - t0, offered: figures.offered, attempts: figures.attempts });
      }
    };
    const victimsOf = (): readonly DrillPod[] =>
      options.kill === "all" ? targets : [targets[Math.floor(Math.random() * targets.length)]!];

    switch (options.scenario) {
      case "kill-tool":
        await killWindow(victimsOf(), options.durationS * 1000);
        if (options.kill === "one")
          notes.push(
            `--kill one: ${options.tool} kept a live replica, so it was never dead and there is no dead-tool window`,
          );
        break;
      case "flap": {
        const end = Date.now() + options.durationS * 1000;
        let cycles = 0;
        while (Date.now() < end && !allEnded()) {
          await killWindow(victimsOf(), FLAP_DOWN_MS);
          cycles += 1;
          await hold(Math.min(FLAP_UP_MS, Math.max(0, end - Date.now())));
        }
        notes.push(
          `${cycles} kill/restart cycle(s): down ${FLAP_DOWN_MS / 1000} s, then restarted and left up ${FLAP_UP_MS / 1000} s`,
        );
        break;
      }
      case "kill-orchestrator": {
        const [victim] = victimsOf();
        await sampler.sample();
        mark(`${await cluster.kill([victim!], "one")}; not restarted`);
        break;
      }
      case "release": {
        const log = (line: string) => ctx.progress(`[${elapsed(t0)}] release: ${line}`);
        const flipped = (r: ReleaseResult) =>
          `${r.kind === "release" ? "released" : "rolled back"} ${options.tool}: ${r.from.image} → ${r.to.image}, serving after ${((r.timings.startMs ?? 0) / 1000).toFixed(1)} s, ` +
          `flipped at ${((Date.parse(r.flippedAt ?? r.startedAt) - t0) / 1000).toFixed(1)} s, old set drained after ${((r.timings.totalMs ?? 0) / 1000).toFixed(1)} s` +
          (r.clientsLeftAtDrain ? ` (${r.clientsLeftAtDrain} client connection(s) still on it)` : "");
        // The sessions asked for between a flip and the old set's drain are the ones whose calls moved sets.
        const startedDuring = (r: ReleaseResult) => {
          const from = Date.parse(r.flippedAt ?? r.startedAt);
          const to = r.drainedAt ? Date.parse(r.drainedAt) : Date.now();
          return startTimes.filter((t) => t >= from && t <= to).length;
        };
        const releaseAndMark = async (kind: "release" | "rollback") => {
          const r = await cluster.blueGreen(kind, kind === "release" ? options.to : undefined, log);
          const during = startedDuring(r);
          mark(`${flipped(r)}; ${during} sessions started between the flip and the drain`);
          if (during === 0)
            notes.push(
              `no session started between the ${kind}'s flip and its drain: a longer --duration keeps the load on through it`,
            );
        };
        mark(`releasing ${options.tool} ${options.to} blue-green`);
        await releaseAndMark("release");
        mark(`rolling ${options.tool} back`);
        await releaseAndMark("rollback");
        notes.push(
          `release: ${plan.length} sessions started one by one over ${options.durationS} s, through the release and the rollback; a released set runs without the added backend latency`,
        );
        break;
      }
      case "latency":
      case "errors": {
        const methods = contractOf(options.tool).methods;
        const method =
          methods.find((m) => m.name === options.method) ?? (options.scenario === "latency" ? methods[0]! : undefined);
        // One profile per pod: with a method named, the backend latency applies to that method only while the fault lasts.
        const profile =
          options.scenario === "latency"
            ? { addedLatencyMs: 2 * methodPolicy(method!).sla!.p95TargetMs, methods: [method!.name] }
            : { ...baseline, errorRate: options.errorRate, methods: method ? [method.name] : [] };
        await setFaults(targets, profile);
        mark(
          options.scenario === "latency"
            ? `${options.tool} ${method!.name}: +${profile.addedLatencyMs} ms on every call (2 × its contract p95 target of ${methodPolicy(method!).sla!.p95TargetMs} ms) on ${targets.length} pods`
            : `${options.tool}${method ? ` ${method.name}` : ""}: ${(options.errorRate * 100).toFixed(0)} % of calls fail UNAVAILABLE (injected) on ${targets.length} pods`,
        );
        await hold(options.durationS * 1000);
        await setFaults(targets, baseline);
        mark("faults cleared");
        break;
      }
    }
    await loading;
    const rest = t0 + boundMs - Date.now();
    if (!(await until(allEnded, Math.max(0, rest))))
      notes.push(`${started.length - ended()} session(s) had not ended when the run's bound passed`);
  } finally {
    approverStop.abort();
    watchStop.abort();
    await Promise.all([approving, watching]);
  }

  const last = await sampler.sample();
  ctx.progress(`[${elapsed(t0)}] collecting: every session, its step records, the ledger`);
  const final = new Map((await listAll(requester)).map((v) => [v.sessionId, v]));
  const traces = await tracesOf(requester, started);
  const ledgerAfter = await readLedger();

  const outcomes: SessionOutcome[] = plan.map((p, i) => {
    const id = ids[i];
    const v = id ? final.get(id) : undefined;
    const records = id ? traces.get(id) : undefined;
    return {
      kind: p.kind,
      needsApproval: p.needsApproval,
      sessionId: v?.sessionId,
      state: v?.state,
      stopReason: v?.stopReason ?? "",
      outcome: v?.outcome ?? "",
      outcomeReason: v?.outcomeReason ?? "",
      answer: v?.answer ?? "",
      durationMs: v ? Math.max(0, v.updatedAtMs - v.createdAtMs) : undefined,
      trace: records ? traceFacts(records) : undefined,
    };
  });
  const toolFigures: Record<string, ToolFigures> = {};
  for (const tool of tools) {
    const figures = toolCallFigures(first, last, tool, contractOf(tool).typeName);
    toolFigures[tool] = { ...figures, breakerTransitions: breakerTransitions(first, last, tool) };
  }
  return {
    options,
    outcomes,
    audit: auditSideEffects(outcomes, ledgerBefore, ledgerAfter),
    tools: toolFigures,
    deadWindows,
    faults,
    approvalsResolved: approver.resolved,
    parks: growth(first, last, "loopguard_session_transitions_total", { to: "PARKED" }),
    boundMs,
    containers: cluster.replicas,
    notes,
  };
}
