// The release gate on the plain Kubernetes path, run by the release itself as Argo Rollouts runs
// its analysis (GATE_SCHEDULE, the same Job and queries): the smoke Job is created, the gate
// queries are asked of Prometheus through the API server's service proxy (`kubectl get --raw`, so
// the release needs nothing but kubectl) after the initial delay until `count` measurements are
// answered; a kind whose answer fails more than failureLimit of them, Prometheus failing to answer
// more than consecutiveErrorLimit times in a row, or a smoke Job that fails, fails the gate.
import { GATE_SCHEDULE } from "../../manifests/smoke-objects.js";
import { ReleaseRefused } from "./contract-gate.js";
import { type GateAnswer, type GateVerdict, gateVerdict, prometheusAnswer } from "./gate.js";
import type { GateStep } from "./k8s.js";

export interface GateRun {
  readonly namespace: string;
  /** Prometheus's in-cluster URL, e.g. http://prometheus-operated.monitoring.svc:9090. */
  readonly prometheus: string;
  readonly kubectl: (args: readonly string[], input?: string) => Promise<string>;
  readonly sleep: (ms: number) => Promise<void>;
  readonly log: (line: string) => void;
}

/** The API server's proxy path to a Prometheus Service, from its in-cluster URL. */
export function prometheusProxyPath(url: string): string {
  const match = /^(https?):\/\/([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.[a-z0-9.-]+)?:(\d+)\/?$/.exec(url);
  if (!match)
    throw new ReleaseRefused(
      `--prometheus must be a Service's in-cluster URL, http://<service>.<namespace>.svc[.cluster.local]:<port>, got "${url}"`,
    );
  const [, scheme, service, namespace, port] = match;
  return `/api/v1/namespaces/${namespace}/services/${scheme}:${service}:${port}/proxy`;
}

type JobOutcome = "succeeded" | "failed";

async function jobOutcome(step: GateStep, run: GateRun): Promise<JobOutcome> {
  const deadline =
    Date.now() + ((step.job.spec as { activeDeadlineSeconds: number }).activeDeadlineSeconds + 60) * 1000;
  for (;;) {
    const job = JSON.parse(await run.kubectl(["-n", run.namespace, "get", "job", step.name, "-o", "json"])) as {
      status?: { conditions?: { type: string; status: string }[] };
    };
    const done = job.status?.conditions?.find(
      (c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
    );
    if (done) return done.type === "Complete" ? "succeeded" : "failed";
    if (Date.now() > deadline) return "failed";
    await run.sleep(GATE_SCHEDULE.intervalSeconds * 1000);
  }
}

/** The smoke Job's own line (what loopguard-smoke printed), or why there is none. */
async function smokeLine(step: GateStep, run: GateRun): Promise<string> {
  const logs = await run
    .kubectl(["-n", run.namespace, "logs", `job/${step.name}`, "--tail", "1"])
    .catch((error: Error) => `no log: ${error.message}`);
  return logs.trim() || "the smoke Job printed nothing";
}

/** One measurement: every gate query of the step asked of Prometheus; throws when it cannot answer one. */
async function measure(step: GateStep, run: GateRun, proxy: string): Promise<GateAnswer[]> {
  const answers: GateAnswer[] = [];
  for (const q of step.queries)
    answers.push(
      prometheusAnswer(
        q.kind,
        JSON.parse(await run.kubectl(["get", "--raw", `${proxy}/api/v1/query?query=${encodeURIComponent(q.query)}`])),
      ),
    );
  return answers;
}

/** Smoke Job and SLO measurements of one gate step; the verdict names what failed first. */
export async function runGate(step: GateStep, run: GateRun): Promise<GateVerdict> {
  const s = GATE_SCHEDULE;
  const proxy = prometheusProxyPath(run.prometheus);
  await run.kubectl(step.command.slice(1), JSON.stringify(step.job));
  run.log(`  smoke Job ${step.name} created; the SLO queries in ${s.initialDelaySeconds} s`);
  // Followed while the queries run; caught now, so a kubectl failure is reported at the end, not lost.
  const job = jobOutcome(step, run).catch((error: Error) => error);
  const failed = new Map<string, number>();
  const problems: string[] = [];
  let last: GateVerdict | undefined;
  let answered = 0;
  let errorsInARow = 0;
  await run.sleep(s.initialDelaySeconds * 1000);
  // As Argo counts them, a measurement Prometheus could not answer is none of the `count`: it is
  // taken again, so a gate is judged on `count` answers or not passed at all.
  while (answered < s.count) {
    let answers: GateAnswer[];
    try {
      answers = await measure(step, run, proxy);
      errorsInARow = 0;
    } catch (error) {
      errorsInARow += 1;
      if (errorsInARow > s.consecutiveErrorLimit) {
        problems.push(
          `Prometheus could not answer the gate queries ${errorsInARow} times in a row: ${(error as Error).message}`,
        );
        break;
      }
      run.log(
        `  Prometheus could not answer the gate queries: ${(error as Error).message}; again in ${s.errorRetrySeconds} s`,
      );
      await run.sleep(s.errorRetrySeconds * 1000);
      continue;
    }
    answered += 1;
    last = gateVerdict(step.methods, answers);
    run.log(`  measurement ${answered} of ${s.count}: ${last.passed ? "passed" : `failed: ${last.findings[0]}`}`);
    for (const answer of answers) {
      if (!gateVerdict(step.methods, [answer]).passed) failed.set(answer.kind, (failed.get(answer.kind) ?? 0) + 1);
    }
    if ([...failed.values()].some((n) => n > s.failureLimit)) break;
    if (answered < s.count) await run.sleep(s.intervalSeconds * 1000);
  }
  const over = [...failed]
    .filter(([, n]) => n > s.failureLimit)
    .map(([kind, n]) => `${kind} failed ${n} of its measurements (${s.failureLimit} allowed)`);
  const outcome = await job;
  const smoke =
    outcome instanceof Error ? `cannot follow the smoke Job: ${outcome.message}` : await smokeLine(step, run);
  const smokeFailed = outcome !== "succeeded";
  const failures = [
    ...(smokeFailed ? [`smoke Job ${step.name} failed: ${smoke}`] : []),
    ...(over.length > 0 ? [last!.findings[0]!, ...over] : []),
    ...problems,
  ];
  return {
    passed: failures.length === 0,
    findings: [...failures, ...(smokeFailed ? [] : [smoke]), ...(last?.findings ?? [])],
  };
}
