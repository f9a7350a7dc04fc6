// `pnpm drill <scenario> --tool <name> …`: a fault-injection drill on the local containers (or,
// with --k8s, as a Job in a cluster: k8s-launch.ts), with a report for people (Markdown) and for machines (JSON). Progress
// goes to stderr; with --json the last stdout line is the report. Exit 0 when the run completed,
// whatever its figures; 2 for a wrong argument; 1, with one line, when it could not run.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import { setTimeout as sleep } from "node:timers/promises";
import { NAMESPACE } from "../manifests/cluster-names.js";
import { toYamlDocuments } from "../manifests/yaml.js";
import { podChaosPlan } from "./k8s.js";
import { drillJob, jobNameOf, kubectl, launchK8sDrill } from "./k8s-launch.js";
import { runCli, UsageError } from "../cli.js";
import { catalogueOf, type DrillOptions, parseDrillArgs, USAGE } from "./options.js";
import { runLocalDrill } from "./local.js";
import { DrillError } from "./drill-error.js";
import { type DrillResult, writeReportFiles } from "./report-files.js";
import { runIdOf } from "./run.js";
import { drillRunnerTemplate } from "../manifests/drill-runner-objects.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

function summary(result: DrillResult): string {
  const r = result.report;
  const dead =
    r.calls_reaching_dead_tool === null
      ? ""
      : `; dead ${r.tool}: ${r.calls_reaching_dead_tool} attempts for ${r.calls_offered_while_down} calls offered (ratio ${r.dead_tool_ratio ?? "–"})`;
  return [
    `drill ${r.scenario} ${r.tool}: ${r.sessions_ended}/${r.sessions_started} sessions ended, ${r.sessions_lost} lost, ${r.sessions_hung} hung, success ${(r.success_rate * 100).toFixed(2)} % (cache ${r.done.cache}, degraded ${r.done.degraded})`,
    `  refunds: ${r.duplicate_side_effects} duplicate, ${r.lost_side_effects} lost, ${r.unowned_side_effects} unowned; calls failed ${r.calls_failed}${dead}`,
    `  p50/p95/p99 ${r.p50_ms ?? "–"}/${r.p95_ms ?? "–"}/${r.p99_ms ?? "–"} ms; runtime ${(r.runtime_ms / 1000).toFixed(1)} s, runner CPU ${r.runner_cpu_ms} ms`,
    `  report: ${result.markdownPath}`,
    "",
  ].join("\n");
}

async function main(): Promise<number> {
  const services = discoverServices(join(root, "services"));
  const options: DrillOptions = parseDrillArgs(process.argv.slice(2), catalogueOf(services));
  if (options.k8s && options.dryRun) {
    const runId = runIdOf(options, new Date());
    const objects = [
      drillJob(drillRunnerTemplate(services), jobNameOf(runId), options),
      ...podChaosPlan(options, runId),
    ];
    process.stdout.write(options.json ? `${JSON.stringify(objects)}\n` : toYamlDocuments(objects));
    return 0;
  }
  const abort = new AbortController();
  const interrupt = () => {
    if (abort.signal.aborted) process.exit(130);
    process.stderr.write(
      options.k8s
        ? "drill: interrupted; deleting the drill's Job (its runner removes its PodChaos objects)\n"
        : "drill: interrupted; removing the drill's containers (Ctrl-C again to leave them)\n",
    );
    abort.abort(new Interrupted());
  };
  process.on("SIGINT", interrupt);
  process.on("SIGTERM", interrupt);
  const ctx = {
    root,
    reportsDir: join(resolve(process.env.LOOPGUARD_DATA_DIR || join(root, ".data")), "drills"),
    services,
    progress: (line: string) => process.stderr.write(`${line}\n`),
    signal: abort.signal,
  };
  try {
    const result = options.k8s ? await launched(options, ctx) : await runLocalDrill(options, ctx);
    process.stderr.write(`report: ${result.markdownPath} (JSON: ${result.jsonPath})\n`);
    process.stdout.write(
      options.json ? `${JSON.stringify({ ...result.report, report_path: result.markdownPath })}\n` : summary(result),
    );
    return 0;
  } catch (error) {
    if (error instanceof Interrupted) return 130;
    process.stderr.write(`drill: ${(error as Error).message.split("\n")[0]}\n`);
    return 1;
  }
}

/** Runs the drill as a Job in the cluster and keeps the report it printed; a Job that failed is a run that could not be made. */
async function launched(
  options: DrillOptions,
  ctx: { reportsDir: string; progress: (line: string) => void; signal: AbortSignal },
): Promise<DrillResult> {
  const runId = runIdOf(options, new Date());
  const run = await launchK8sDrill(options, runId, {
    kubectl,
    namespace: NAMESPACE,
    progress: ctx.progress,
    sleep: (ms) => sleep(ms),
    signal: ctx.signal,
  });
  if (!run.succeeded || !run.output)
    throw new DrillError(
      `Job ${run.job} failed: ${run.lastLine || "it printed nothing"} (kubectl -n ${NAMESPACE} logs job/${run.job})`,
    );
  const startedAt = new Date(run.output.started_at);
  const files = writeReportFiles(ctx.reportsDir, run.output.run_id, run.output.drill_report, startedAt);
  return { runId: run.output.run_id, startedAt, report: run.output.drill_report, ...files };
}

class Interrupted extends Error {
  override readonly name = "Interrupted";
  constructor() {
    super("interrupted");
  }
}

runCli("drill", main, (error) =>
  error instanceof UsageError ? `${error.message}\n${USAGE}` : error.message.split("\n")[0]!,
);
