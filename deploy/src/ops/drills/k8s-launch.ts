// `pnpm drill … --k8s` on the person's machine: makes a Job of the chaos-drills component's
// template (the CronJob loopguard-drill-runner, so the image, tag and any overlay patch are the
// cluster's own) with the scenario as its arguments, follows its log, and ends with the Job's
// result and the report it printed. Everything goes through kubectl with the person's own rights
// (LAUNCHER_API_CALLS); the load, the kills and the audit run inside the cluster (k8s.ts).
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { CronJob, Job } from "kubernetes-types/batch/v1.js";
import { NAMESPACE } from "../../manifests/cluster-names.js";
import type { DrillOptions } from "./options.js";
import type { DrillReport } from "./report.js";
import { DrillError } from "./drill-error.js";
import { DRILL_RUNNER } from "../../manifests/drill-runner-objects.js";
import { DRILL_LEASE } from "../../manifests/drill-api-calls.js";
import { leaseOf } from "./cluster-api.js";
import { refuseWhileHeld } from "./drill-lease.js";

/** The runner's last stdout line starts with this key: `{"drill_report": …, "run_id": …, "started_at": …}`. */
export const REPORT_KEY = "drill_report";
/** Time for the pod to be scheduled and its image pulled, on top of the run's own bound. */
const START_MARGIN_S = 600;

export interface RunnerOutput {
  readonly drill_report: DrillReport;
  readonly run_id: string;
  readonly started_at: string;
}

export interface Kubectl {
  /** Runs kubectl with `input` on stdin; rejects with its stderr in one line. */
  run(args: readonly string[], input?: string): Promise<string>;
  /** Runs kubectl, handing each stdout line to `onLine` as it comes. */
  follow(args: readonly string[], onLine: (line: string) => void): Promise<void>;
}

function failure(args: readonly string[], stderr: string, code: number | null): DrillError {
  return new DrillError(
    `kubectl ${args.slice(0, 4).join(" ")}: ${stderr.trim().replaceAll("\n", " | ") || `exit ${code}`}`,
  );
}

/** kubectl from PATH. */
export const kubectl: Kubectl = {
  run: (args, input) =>
    new Promise((resolve, reject) => {
      const child = spawn("kubectl", args, { stdio: ["pipe", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (chunk: Buffer) => (stdout += chunk));
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk));
      child.on("error", (error) => reject(new DrillError(`kubectl: ${error.message} (kubectl is needed on PATH)`)));
      child.on("close", (code) => (code === 0 ? resolve(stdout) : reject(failure(args, stderr, code))));
      child.stdin.end(input ?? "");
    }),
  follow: (args, onLine) =>
    new Promise((resolve, reject) => {
      const child = spawn("kubectl", args, { stdio: ["ignore", "pipe", "pipe"] });
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk));
      createInterface({ input: child.stdout }).on("line", onLine);
      child.on("error", (error) => reject(new DrillError(`kubectl: ${error.message} (kubectl is needed on PATH)`)));
      child.on("close", (code) => (code === 0 ? resolve() : reject(failure(args, stderr, code))));
    }),
};

/** The runner's arguments: the options that shape the run, spelled out so the Job's command line says what it ran. */
export function runnerArgs(options: DrillOptions): string[] {
  return [
    options.scenario,
    "--tool",
    options.tool,
    ...(options.scenario === "kill-orchestrator" ? [] : ["--kill", options.kill]),
    "--sessions",
    String(options.sessions),
    "--duration",
    String(options.durationS),
    "--refund-share",
    String(Math.round(options.refundShare * 100)),
    "--k8s",
    ...(options.prometheus ? ["--prometheus", options.prometheus] : []),
  ];
}

/** A Job of the template, named for the run, with the scenario's arguments and a deadline past the run's bound. */
export function drillJob(template: CronJob, name: string, options: DrillOptions, namespace = NAMESPACE): Job {
  const jobTemplate = template.spec?.jobTemplate;
  const container = jobTemplate?.spec?.template.spec?.containers[0];
  if (!jobTemplate?.spec || !container)
    throw new DrillError(
      `CronJob ${DRILL_RUNNER} has no Job template with a container: apply the chaos-drills component`,
    );
  const spec = jobTemplate.spec;
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name, namespace, labels: { ...jobTemplate.metadata?.labels, "loopguard/drill-run": name } },
    spec: {
      ...spec,
      activeDeadlineSeconds: options.durationS + START_MARGIN_S,
      template: {
        ...spec.template,
        spec: { ...spec.template.spec!, containers: [{ ...container, args: runnerArgs(options) }] },
      },
    },
  };
}

/** A Job name for the run (a DNS label). */
export function jobNameOf(runId: string): string {
  return `drill-${runId.toLowerCase().replace(/[^a-z0-9-]/g, "")}`.slice(0, 63).replace(/-+$/, "");
}

export interface LaunchContext {
  readonly kubectl: Kubectl;
  readonly namespace: string;
  readonly progress: (line: string) => void;
  readonly sleep: (ms: number) => Promise<void>;
  readonly signal: AbortSignal;
}

export interface Launched {
  readonly job: string;
  readonly succeeded: boolean;
  /** What the runner printed as its report; undefined when it printed none (it could not run). */
  readonly output: RunnerOutput | undefined;
  /** The runner's last line other than the report: why it failed, when it did. */
  readonly lastLine: string;
}

/**
 * `logs -f` ends with the container (the condition follows within seconds), or earlier when the
 * log stream breaks; the Job's deadline bounds the wait either way (it then fails DeadlineExceeded).
 */
async function jobResult(ctx: LaunchContext, job: Job): Promise<boolean> {
  const name = job.metadata!.name!;
  const deadline = Date.now() + (job.spec!.activeDeadlineSeconds! + 120) * 1000;
  for (;;) {
    const live = JSON.parse(await ctx.kubectl.run(["-n", ctx.namespace, "get", "job", name, "-o", "json"])) as Job;
    const done = live.status?.conditions?.find(
      (c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
    );
    if (done) return done.type === "Complete";
    if (Date.now() > deadline)
      throw new DrillError(`Job ${name} has no Complete or Failed condition past its deadline`);
    await ctx.sleep(2000);
  }
}

/**
 * Refuses at once, rather than from a Job that fails, while another drill holds the cluster. Only a
 * courtesy: the runner's own take of the Lease decides, so a person whose Role (bound before the
 * launcher read the Lease) may not read it is let through to that.
 */
async function refuseWhileLeased(ctx: LaunchContext): Promise<void> {
  let lease: string;
  try {
    lease = await ctx.kubectl.run([
      "-n",
      ctx.namespace,
      "get",
      "lease",
      DRILL_LEASE,
      "-o",
      "json",
      "--ignore-not-found",
    ]);
  } catch (error) {
    if (!(error as Error).message.includes("(Forbidden)")) throw error;
    ctx.progress(
      `cannot read Lease ${ctx.namespace}/${DRILL_LEASE} (Forbidden): the runner checks that no other drill runs`,
    );
    return;
  }
  refuseWhileHeld(lease.trim() ? leaseOf(JSON.parse(lease)) : undefined, ctx.namespace);
}

export async function launchK8sDrill(options: DrillOptions, runId: string, ctx: LaunchContext): Promise<Launched> {
  const ns = ["-n", ctx.namespace];
  await refuseWhileLeased(ctx);
  const template = JSON.parse(await ctx.kubectl.run([...ns, "get", "cronjob", DRILL_RUNNER, "-o", "json"])) as CronJob;
  const name = jobNameOf(runId);
  const job = drillJob(template, name, options, ctx.namespace);
  await ctx.kubectl.run([...ns, "create", "-f", "-"], JSON.stringify(job));
  ctx.progress(
    `Job ${name} created (${job.spec!.template.spec!.containers[0]!.image}): ${runnerArgs(options).join(" ")}`,
  );
  // Ctrl-C: the Job goes, and with it its pod; the runner removes its PodChaos objects on SIGTERM.
  const remove = () => void ctx.kubectl.run([...ns, "delete", "job", name, "--wait=false"]).catch(() => undefined);
  ctx.signal.addEventListener("abort", remove, { once: true });
  let output: RunnerOutput | undefined;
  let lastLine = "";
  try {
    // A Ctrl-C reaches kubectl too (one process group): its exit then is the interruption, not an error.
    const followed = await ctx.kubectl
      .follow([...ns, "logs", "-f", `job/${name}`, "--pod-running-timeout=5m"], (line) => {
        if (line.startsWith(`{"${REPORT_KEY}"`)) output = JSON.parse(line) as RunnerOutput;
        else {
          lastLine = line;
          ctx.progress(line);
        }
      })
      .then(
        () => undefined,
        (error: Error) => error,
      );
    if (ctx.signal.aborted) throw ctx.signal.reason;
    if (followed) throw followed;
    return { job: name, succeeded: await jobResult(ctx, job), output, lastLine };
  } finally {
    ctx.signal.removeEventListener("abort", remove);
  }
}
