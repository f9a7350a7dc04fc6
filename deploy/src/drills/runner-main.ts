// The drill-runner image's entry: one drill inside the cluster, as the Job `pnpm drill … --k8s`
// creates runs it (arguments: the scenario's; environment: the Job template's). Progress goes
// to stderr; the last stdout line is the report, `{"drill_report": …}`, which the launcher reads
// off the Job's log. Exit 0 when the run completed, 2 for a wrong argument, 1 when it could not run.
import { KubeConfig } from "@kubernetes/client-node";
import { drillKube } from "./cluster-api.js";
import { clusterServices, runClusterDrill } from "./k8s.js";
import { REPORT_KEY } from "./k8s-launch.js";
import { runCli, UsageError } from "../cli.js";
import { catalogueOf, parseDrillArgs, USAGE } from "./options.js";
import { RUNNER_TMP } from "../manifests/drill-runner-objects.js";

async function main(): Promise<number> {
  const services = clusterServices(process.env.LOOPGUARD_DRILL_SERVICES);
  const options = parseDrillArgs(process.argv.slice(2), catalogueOf(services));
  const namespace = process.env.LOOPGUARD_DRILL_NAMESPACE;
  if (!namespace)
    throw new Error("LOOPGUARD_DRILL_NAMESPACE is not set (the Job template sets it from the pod's namespace)");
  const config = new KubeConfig();
  config.loadFromCluster();
  const abort = new AbortController();
  // The Job deleted (the launcher's Ctrl-C) or past its deadline: the run stops and removes its PodChaos objects.
  process.on("SIGTERM", () => abort.abort(new Error("the runner was stopped (SIGTERM)")));
  const result = await runClusterDrill(
    options,
    {
      root: RUNNER_TMP,
      reportsDir: `${RUNNER_TMP}/drills`,
      services,
      progress: (line) => process.stderr.write(`${line}\n`),
      signal: abort.signal,
    },
    { kube: drillKube(config, namespace), namespace },
  );
  process.stdout.write(
    `${JSON.stringify({ [REPORT_KEY]: result.report, run_id: result.runId, started_at: result.startedAt.toISOString() })}\n`,
  );
  return 0;
}

runCli("drill-runner", main, (error) =>
  error instanceof UsageError ? `${error.message}\n${USAGE}` : error.message.split("\n")[0]!,
);
