// `pnpm release <tool> --to <tag> | --rollback [--k8s --overlay DIR [--namespace NS] [--from-manifests DIR] [--prometheus URL]] [--dry-run] [--json]`:
// a blue-green release of one tool (see index.ts). Progress goes to stderr; the outcome to stdout
// (with --json one JSON object on the last line). Exit 0 when done, 1 when refused or failed
// (one line saying why — the contract or release gate that failed, and what was undone — then
// buf's findings or the gate's other findings), 2 on a usage error.
import { parseArgs } from "node:util";
import { runCli, UsageError } from "../../cli.js";
import { checkTag } from "../../local/images.js";
import { type K8sReleaseResult, release, ReleaseRefused, type ReleaseResult, rollback } from "./index.js";

const USAGE =
  "usage: pnpm release <tool> --to <image tag> [--k8s --overlay DIR [--namespace NS] [--from-manifests DIR] [--prometheus URL]] [--dry-run] [--json]\n" +
  "       pnpm release <tool> --rollback [--k8s --overlay DIR [--namespace NS] [--from-manifests DIR]] [--dry-run] [--json]\n" +
  "       --overlay: the kustomization the cluster is applied from; the release is recorded in its release-state component (not needed with --dry-run)";

function seconds(ms: number | undefined): string {
  return ms === undefined ? "–" : `${(ms / 1000).toFixed(1)} s`;
}

function summary(result: ReleaseResult | K8sReleaseResult): string {
  const lines = [
    `${result.kind} of ${result.tool} on ${result.target}${result.dryRun ? " (dry run: nothing changed)" : ""}`,
    `  from ${result.from.colour ? `${result.from.colour} ` : ""}${result.from.image}  ${result.from.pods.join(" ")}`,
    `  to   ${result.to.colour ? `${result.to.colour} ` : ""}${result.to.image}  ${result.to.pods.join(" ")}`,
  ];
  if ("plan" in result) {
    for (const [index, step] of result.plan.steps.entries()) {
      lines.push(`  ${index + 1}. ${step.description}`, `     ${step.command.join(" ")}`);
      if (step.action !== "migrate" && step.undone) lines.push(`     if it fails: ${step.undone}`);
    }
    if (result.dryRun) lines.push("  (--json shows each patch and the object it leaves)");
  }
  if (!result.dryRun) {
    const t = result.timings;
    lines.push(
      `  started → serving ${seconds(t.startMs)}, gate ${seconds(t.gateMs)}, flip ${seconds(t.flipMs)}, clients moved ${seconds(t.clientsMovedMs)}, drain ${seconds(t.drainMs)}, total ${seconds(t.totalMs)}`,
    );
    for (const [when, findings] of [
      ["before the flip", result.gate?.beforeFlip],
      ["after the flip", result.gate?.afterFlip],
    ] as const) {
      if (findings) lines.push(`  gate ${when}: ${findings.join("; ")}`);
    }
    if (result.flippedAt) lines.push(`  flipped at ${result.flippedAt}`);
    if ("recorded" in result && result.recorded) lines.push(`  recorded in ${result.recorded}: commit it`);
    if (result.clientsLeftAtDrain)
      lines.push(
        `  ${result.clientsLeftAtDrain} client connection(s) were still open on the old set when it was drained`,
      );
  }
  return `${lines.join("\n")}\n`;
}

async function main(): Promise<number> {
  const parsed = (() => {
    try {
      return parseArgs({
        allowPositionals: true,
        options: {
          to: { type: "string" },
          rollback: { type: "boolean" },
          k8s: { type: "boolean" },
          namespace: { type: "string" },
          "from-manifests": { type: "string" },
          overlay: { type: "string" },
          prometheus: { type: "string" },
          "dry-run": { type: "boolean" },
          json: { type: "boolean" },
        },
      });
    } catch (error) {
      throw new UsageError(`${(error as Error).message.split(". ")[0]}\n${USAGE}`);
    }
  })();

  const { values, positionals } = parsed;
  if (positionals.length !== 1) throw new UsageError(`name one tool\n${USAGE}`);
  if (Boolean(values.to) === Boolean(values.rollback))
    throw new UsageError(`give either --to <image tag> or --rollback\n${USAGE}`);
  if (!values.k8s && (values.namespace || values["from-manifests"] || values.prometheus || values.overlay)) {
    throw new UsageError(`--namespace, --from-manifests, --prometheus and --overlay belong to --k8s\n${USAGE}`);
  }
  if (values.k8s && !values["dry-run"] && !values.overlay)
    throw new UsageError(`--k8s needs --overlay DIR, where the release is recorded so a re-apply keeps it\n${USAGE}`);
  if (values["from-manifests"] && !values["dry-run"])
    throw new UsageError("--from-manifests plans against a rendering, not a cluster: add --dry-run");
  if (values.namespace !== undefined && !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(values.namespace))
    throw new UsageError(`--namespace must be a Kubernetes namespace name, got "${values.namespace}"`);
  let to: string | undefined;
  try {
    to = values.to === undefined ? undefined : checkTag(values.to);
  } catch (error) {
    throw new UsageError((error as Error).message.replace("--tag", "--to"));
  }
  const options = {
    tool: positionals[0]!,
    k8s: values.k8s ?? false,
    dryRun: values["dry-run"] ?? false,
    ...(values.namespace ? { namespace: values.namespace } : {}),
    ...(values["from-manifests"] ? { fromManifests: values["from-manifests"] } : {}),
    ...(values.prometheus ? { prometheus: values.prometheus } : {}),
    ...(values.overlay ? { overlay: values.overlay } : {}),
    log: (line: string) => process.stderr.write(`release: ${line}\n`),
  };
  const result = to ? await release({ ...options, to }) : await rollback(options);
  process.stdout.write(values.json ? `${JSON.stringify(result)}\n` : summary(result));
  return 0;
}

runCli("release", main, (error) =>
  error instanceof ReleaseRefused && error.detail ? `${error.message}\n${error.detail}` : error.message,
);
