// Applies a Kubernetes release plan (k8s.ts) step by step through kubectl: patches, waits for
// Ready pods or a promoted Rollout, the scale-down delay, and on the plain path the release gate
// (k8s-gate.ts). A gate that fails, an Argo Rollout aborted or paused by its analysis, or any step
// that carries an undo and cannot run (a gate whose smoke Job the API server refuses, a patch after
// the flip) runs the step's undo steps and stops the release with ReleaseRefused saying what failed
// and what was undone; a step without one that fails after the flip says which version is live.
import { execFile } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import type { IRollout } from "@kubernetes-models/argo-rollouts/argoproj.io/v1alpha1/Rollout";
import type { Deployment } from "kubernetes-types/apps/v1.js";
import type { Job } from "kubernetes-types/batch/v1.js";
import type { K8sObject } from "../../manifests/renderings.js";
import { MIGRATE_DEADLINE_SECONDS } from "../../manifests/migration-objects.js";
import { PROMETHEUS_ADDRESS } from "../../manifests/cluster-names.js";
import { ReleaseRefused } from "./contract-gate.js";
import { runGate } from "./k8s-gate.js";
import type { K8sPlan, MigrateStep, Step } from "./k8s.js";

const READY_TIMEOUT_MS = 600_000;
/** Pre- and post-promotion analysis (smoke Job and queries, about 2.5 min each), pods starting, and the scale-down delay. */
const ROLLOUT_TIMEOUT_MS = 1_200_000;
const POLL_MS = 2_000;

/** Runs kubectl (with `input` on stdin); rejects with its stderr in one line. */
export function kubectl(args: readonly string[], input?: string, timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      "kubectl",
      args,
      { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (!error) return resolve(stdout);
        if ((error as NodeJS.ErrnoException).code === "ENOENT")
          return reject(new ReleaseRefused("kubectl is not installed (it talks to the cluster)"));
        reject(
          new ReleaseRefused(
            `kubectl ${args.slice(0, 4).join(" ")}: ${(stderr || error.message).trim().replaceAll("\n", " | ")}`,
          ),
        );
      },
    );
    child.stdin?.end(input ?? "");
  });
}

/** The tool's objects in the cluster: Deployments, Services, HPA, ReplicaSets, and its Rollout where Argo Rollouts is installed. */
export async function liveObjects(namespace: string, tool: string): Promise<K8sObject[]> {
  const selector = `app.kubernetes.io/name=${tool}`;
  const list = async (kinds: string) =>
    (JSON.parse(await kubectl(["-n", namespace, "get", kinds, "-l", selector, "-o", "json"])) as { items: K8sObject[] })
      .items;
  const core = await list("deployments.apps,services,horizontalpodautoscalers.autoscaling,replicasets.apps");
  const rollouts = await list("rollouts.argoproj.io").catch((error: unknown) => {
    if (/the server doesn't have a resource type/.test((error as Error).message)) return [];
    throw error;
  });
  return [...core, ...rollouts];
}

function deploymentReady(deployment: Deployment): boolean {
  const want = deployment.spec?.replicas ?? 1;
  const status = deployment.status ?? {};
  return (
    (status.observedGeneration ?? 0) >= (deployment.metadata?.generation ?? 0) &&
    status.updatedReplicas === want &&
    status.readyReplicas === want &&
    status.availableReplicas === want
  );
}

type RolloutState = "promoted" | "aborted" | "inconclusive" | "progressing";

function rolloutState(rollout: IRollout): { state: RolloutState; message: string } {
  const status = rollout.status ?? {};
  const message = status.message ?? status.phase ?? "";
  if (status.abort || status.phase === "Degraded") return { state: "aborted", message };
  // Paused for a person to decide: the release decides instead, as for a failure.
  if (status.pauseConditions?.some((c) => c.reason === "InconclusiveAnalysisRun"))
    return { state: "inconclusive", message: message || "an analysis was inconclusive" };
  const settled =
    status.currentPodHash !== undefined &&
    status.currentPodHash === status.stableRS &&
    status.blueGreen?.activeSelector === status.currentPodHash;
  return { state: settled && status.phase === "Healthy" ? "promoted" : "progressing", message };
}

/** Creates the migrate Job and waits for it; a failed one stops the release before any pod of the new image starts. */
async function runMigration(
  step: MigrateStep,
  namespace: string,
  run: typeof kubectl,
  wait: (ms: number) => Promise<void>,
): Promise<void> {
  await run(step.command.slice(1), JSON.stringify(step.job));
  const deadline = Date.now() + (MIGRATE_DEADLINE_SECONDS + 60) * 1000;
  for (;;) {
    const job = JSON.parse(await run(["-n", namespace, "get", "job", step.name, "-o", "json"])) as Job;
    const condition = (type: string) => job.status?.conditions?.find((c) => c.type === type && c.status === "True");
    if (condition("Complete")) return;
    const failed = condition("Failed");
    if (failed || Date.now() > deadline) {
      throw new ReleaseRefused(
        `the migration step failed (Job ${step.name}: ${failed?.message ?? failed?.reason ?? "not complete in time"}); its transaction rolled back, no pod of the new image started and the live pods keep serving: \`kubectl -n ${namespace} logs job/${step.name}\` says why`,
      );
    }
    await wait(POLL_MS);
  }
}

export interface StepTimes {
  /** ISO time each step ended, in the plan's order. */
  readonly ended: string[];
  /** When the tool's Service (or Argo's active Service) started selecting the new pods. */
  flippedAt?: string;
  /** What each release gate judged, by when it ran. */
  gates: Record<string, readonly string[]>;
}

export interface ApplyOptions {
  /** Prometheus's in-cluster URL, asked through the API server's service proxy (default: prometheus-operator's). */
  readonly prometheus?: string;
  /** How the release waits; tests pass one that returns at once. */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Applies a plan step by step; a failed gate or analysis, or a step that carries an undo and fails, undoes the release; ReleaseRefused says what is live. */
export async function applyK8sPlan(
  plan: K8sPlan,
  log: (line: string) => void,
  options: ApplyOptions = {},
): Promise<StepTimes> {
  const times: StepTimes = { ended: [], gates: {} };
  await runSteps(plan.steps, plan, log, options, times);
  return times;
}

/** A failure judged by the step itself (a gate, an Argo analysis); its message says what undoing the release leaves. */
class Judged extends ReleaseRefused {}

async function runSteps(
  steps: readonly Step[],
  plan: K8sPlan,
  log: (line: string) => void,
  options: ApplyOptions,
  times: StepTimes,
): Promise<void> {
  let flipped = false;
  for (const step of steps) {
    log(step.description);
    try {
      await runStep(step, plan, log, options, times);
    } catch (error) {
      throw await stepFailed(step, error as Error, flipped, plan, log, options);
    }
    if (step.action === "patch" && step.kind === "Service" && step.name === plan.tool) {
      times.flippedAt = new Date().toISOString();
      flipped = true;
    }
    times.ended.push(new Date().toISOString());
  }
}

/**
 * What a failed step leaves: any failure of a step that carries an undo (a failed verdict, or a
 * gate, patch or wait that could not run) runs it; the error says what is live now.
 */
async function stepFailed(
  step: Step,
  error: Error,
  flipped: boolean,
  plan: K8sPlan,
  log: (line: string) => void,
  options: ApplyOptions,
): Promise<Error> {
  const detail = error instanceof ReleaseRefused ? error.detail : undefined;
  const why =
    error instanceof Judged
      ? error.message
      : step.action === "gate"
        ? `${plan.to.image} could not be judged by the release gate ${step.when}: ${error.message}`
        : `${step.description}: ${error.message}`;
  const to = `${plan.to.colour ? `the ${plan.to.colour} pods, ` : ""}${plan.to.image}`;
  if (step.action === "migrate" || !step.onFailure) {
    if (!flipped) return error;
    return new ReleaseRefused(`${why}; ${plan.tool} selects ${to}`, detail);
  }
  try {
    await runSteps(step.onFailure, plan, (line) => log(`  undo: ${line}`), options, { ended: [], gates: {} });
  } catch (undoError) {
    return new ReleaseRefused(
      `${why}; undoing the release failed too (${(undoError as Error).message}): ${to} may still be live, unjudged — \`pnpm release ${plan.tool} --k8s --rollback\` puts ${plan.from.image} back`,
      detail,
    );
  }
  return new ReleaseRefused(`${why}; ${step.undone}`, detail);
}

async function runStep(
  step: Step,
  plan: K8sPlan,
  log: (line: string) => void,
  options: ApplyOptions,
  times: StepTimes,
): Promise<void> {
  const wait = options.sleep ?? ((ms: number) => sleep(ms));
  if (step.action === "patch") {
    await kubectl(step.command.slice(1));
  } else if (step.action === "gate") {
    const verdict = await runGate(step, {
      namespace: plan.namespace,
      prometheus: options.prometheus ?? PROMETHEUS_ADDRESS,
      kubectl,
      sleep: wait,
      log,
    });
    times.gates[step.when] = verdict.findings;
    for (const line of verdict.findings) log(`  ${line}`);
    if (!verdict.passed)
      throw new Judged(
        `${plan.to.image} failed the release gate ${step.when}: ${verdict.findings[0]}`,
        verdict.findings.slice(1).join("\n"),
      );
  } else if (step.action === "migrate") {
    await runMigration(step, plan.namespace, kubectl, wait);
  } else if (step.until === "delay") {
    await wait(step.seconds! * 1000);
  } else {
    const deadline = Date.now() + (step.until === "ready" ? READY_TIMEOUT_MS : ROLLOUT_TIMEOUT_MS);
    for (;;) {
      const object = JSON.parse(
        await kubectl([
          "-n",
          plan.namespace,
          "get",
          step.kind === "Rollout" ? "rollouts.argoproj.io" : "deployments.apps",
          step.name,
          "-o",
          "json",
        ]),
      );
      if (step.until === "ready" && deploymentReady(object as Deployment)) break;
      if (step.until === "promoted") {
        const { state, message } = rolloutState(object as IRollout);
        const active = (object as IRollout).status?.blueGreen?.activeSelector;
        if (!times.flippedAt && active && active === (object as IRollout).status?.currentPodHash)
          times.flippedAt = new Date().toISOString();
        if (state === "promoted") break;
        if (state === "aborted" || state === "inconclusive") {
          const why = `Rollout ${step.name} ${state === "aborted" ? "was aborted by its analysis" : "paused on an inconclusive analysis"} (${message})`;
          if (!step.onFailure) throw new ReleaseRefused(`${why}: the old pods stay active`);
          throw new Judged(why);
        }
      }
      if (Date.now() > deadline)
        throw new ReleaseRefused(
          `${step.kind} ${step.name} did not get there in time: \`${step.command.join(" ")}\` shows why`,
        );
      await wait(POLL_MS);
    }
  }
}
