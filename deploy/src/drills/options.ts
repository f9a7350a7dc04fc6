// `pnpm drill` arguments, parsed and checked before anything starts: a wrong one is one line
// naming it (exit 2), never a half-started container set.
import { parseArgs } from "node:util";
import { contractFiles } from "@loopguard/proto";
import { type ServiceSpec, servicePolicy, servicesOf } from "@loopguard/tool-sdk";
import { UsageError } from "../cli.js";
import type { KillMode } from "../manifests/pod-chaos-objects.js";

export const SCENARIOS = ["kill-tool", "kill-orchestrator", "latency", "errors", "flap", "release"] as const;
export type Scenario = (typeof SCENARIOS)[number];

export const USAGE =
  "usage: pnpm drill <scenario> --tool <name> [--kill one|all] [--sessions N] [--duration S] [--error-rate P] [--method M] " +
  "[--refund-share P] [--backend-latency MS] [--replicas N] [--tag T] [--to T] [--json] [--k8s [--prometheus URL] [--dry-run]]\n" +
  `  scenarios: ${SCENARIOS.join(", ")}`;

export const MAX_SESSIONS = 1500;
/** A release and its rollback take about 75 s locally: the new set starts, then clients leave the old one within the 30 s max connection age. */
export const RELEASE_LOAD_S = 90;

export interface DrillOptions {
  readonly scenario: Scenario;
  /** The service the fault is aimed at ("orchestrator" for kill-orchestrator). */
  readonly tool: string;
  readonly kill: KillMode;
  readonly sessions: number;
  /** How long the fault lasts, in seconds (a flap: how long it keeps killing and restarting; a release: how long its sessions keep being started). */
  readonly durationS: number;
  /** errors: the share of calls failed, 0..1. */
  readonly errorRate: number;
  /** latency / errors: the method the fault applies to; every method of the tool when undefined (errors) or its first (latency). */
  readonly method: string | undefined;
  /** Share of the sessions that are refunds, 0..1; the rest are knowledge questions. */
  readonly refundShare: number;
  /** Latency every tool adds to each call, standing in for its backend (local containers only). */
  readonly backendLatencyMs: number;
  /** Replicas of the target service (≥ 2). */
  readonly replicas: number;
  /** Image tag the containers run. */
  readonly tag: string;
  /** release: the image tag to flip to (then back). */
  readonly to: string | undefined;
  readonly json: boolean;
  readonly k8s: boolean;
  /** --k8s: the in-cluster URL of a Prometheus that scrapes the orchestrators; without it the runner reads each replica's page. */
  readonly prometheus: string | undefined;
  readonly dryRun: boolean;
}

/** What the arguments are checked against: the suite's services and each tool's methods. */
export interface Catalogue {
  readonly tools: readonly string[];
  readonly orchestrator: string;
  readonly methodsOf: (tool: string) => readonly string[];
}

/** What the suite's services and contracts offer a drill to aim at. */
export function catalogueOf(services: readonly Pick<ServiceSpec, "name" | "kind">[]): Catalogue {
  const contracts = servicesOf(contractFiles);
  return {
    tools: services.filter((s) => s.kind === "tool").map((s) => s.name),
    orchestrator: services.find((s) => s.kind === "orchestrator")!.name,
    methodsOf: (tool) => contracts.find((c) => servicePolicy(c).toolName === tool)?.methods.map((m) => m.name) ?? [],
  };
}

function integer(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < min || value > max)
    throw new UsageError(`--${name} takes an integer in ${min}..${max}, got "${raw}"`);
  return value;
}

export function parseDrillArgs(argv: readonly string[], catalogue: Catalogue): DrillOptions {
  const parsed = (() => {
    try {
      return parseArgs({
        args: [...argv],
        allowPositionals: true,
        options: {
          tool: { type: "string" },
          kill: { type: "string" },
          sessions: { type: "string" },
          duration: { type: "string" },
          "error-rate": { type: "string" },
          method: { type: "string" },
          "refund-share": { type: "string" },
          "backend-latency": { type: "string" },
          replicas: { type: "string" },
          tag: { type: "string" },
          to: { type: "string" },
          json: { type: "boolean", default: false },
          k8s: { type: "boolean", default: false },
          prometheus: { type: "string" },
          "dry-run": { type: "boolean", default: false },
        },
      });
    } catch (error) {
      throw new UsageError((error as Error).message.split("\n")[0]!.split(". ")[0]!);
    }
  })();

  const { values, positionals } = parsed;
  const [scenarioName, ...extra] = positionals;
  if (!scenarioName) throw new UsageError("name a scenario");
  if (extra.length > 0) throw new UsageError(`one scenario at a time, got "${positionals.join(" ")}"`);
  if (!(SCENARIOS as readonly string[]).includes(scenarioName))
    throw new UsageError(`unknown scenario "${scenarioName}"`);
  const scenario = scenarioName as Scenario;

  let tool = values.tool;
  if (scenario === "kill-orchestrator") {
    if (tool !== undefined && tool !== catalogue.orchestrator)
      throw new UsageError(
        `kill-orchestrator kills an ${catalogue.orchestrator} replica; leave --tool out or say --tool ${catalogue.orchestrator}`,
      );
    tool = catalogue.orchestrator;
  } else if (tool === undefined) {
    throw new UsageError(`${scenario} needs --tool (${catalogue.tools.join(", ")})`);
  } else if (!catalogue.tools.includes(tool)) {
    throw new UsageError(`unknown tool "${tool}" (tools: ${catalogue.tools.join(", ")})`);
  }

  const kills = scenario === "kill-tool" || scenario === "flap";
  if (values.kill !== undefined && !kills)
    throw new UsageError(`--kill belongs to kill-tool and flap, not ${scenario}`);
  if (values.kill !== undefined && values.kill !== "one" && values.kill !== "all")
    throw new UsageError(`--kill takes one or all, got "${values.kill}"`);
  const kill: KillMode = scenario === "kill-orchestrator" ? "one" : ((values.kill as KillMode | undefined) ?? "all");

  if (values["error-rate"] !== undefined && scenario !== "errors")
    throw new UsageError(`--error-rate belongs to errors, not ${scenario}`);
  const errorPercent = integer("error-rate", values["error-rate"], 20, 1, 100);

  if (values.method !== undefined) {
    if (scenario !== "latency" && scenario !== "errors")
      throw new UsageError(`--method belongs to latency and errors, not ${scenario}`);
    const methods = catalogue.methodsOf(tool);
    if (!methods.includes(values.method))
      throw new UsageError(`${tool} has no method "${values.method}" (methods: ${methods.join(", ")})`);
  }

  if (scenario === "release" && values.to === undefined)
    throw new UsageError("release needs --to <image tag> (the version to flip to, then roll back from)");
  if (values.to !== undefined && scenario !== "release")
    throw new UsageError(`--to belongs to release, not ${scenario}`);
  if (values.k8s && !["kill-tool", "kill-orchestrator", "flap"].includes(scenario)) {
    throw new UsageError(
      `--k8s runs the pod-kill scenarios (kill-tool, kill-orchestrator, flap) with Chaos Mesh; ${scenario === "release" ? "release on a cluster is `pnpm release … --k8s`" : `${scenario} sets faults in each pod through ToolAdminService, which needs the local containers`}`,
    );
  }
  if (values.prometheus !== undefined) {
    if (!values.k8s)
      throw new UsageError("--prometheus belongs to --k8s (where the runner reads the orchestrators' metrics)");
    if (!/^https?:\/\/[A-Za-z0-9.-]+(:\d+)?(\/[A-Za-z0-9._~/-]*)?$/.test(values.prometheus))
      throw new UsageError(
        `--prometheus takes an http(s) URL such as http://prometheus-operated.monitoring.svc:9090, got "${values.prometheus}"`,
      );
  }
  if (values["dry-run"] && !values.k8s)
    throw new UsageError("--dry-run belongs to --k8s (it prints the objects a cluster run would apply)");
  for (const [name, value] of [
    ["tag", values.tag],
    ["to", values.to],
  ] as const) {
    if (value !== undefined && !/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/.test(value))
      throw new UsageError(`--${name} must be 1-128 of [A-Za-z0-9_.-], not starting with . or -, got "${value}"`);
  }

  return {
    scenario,
    tool,
    kill,
    sessions: integer("sessions", values.sessions, 200, 1, MAX_SESSIONS),
    durationS: integer("duration", values.duration, scenario === "release" ? RELEASE_LOAD_S : 10, 1, 600),
    errorRate: errorPercent / 100,
    method: values.method,
    refundShare: integer("refund-share", values["refund-share"], 50, 0, 100) / 100,
    backendLatencyMs: integer("backend-latency", values["backend-latency"], 100, 0, 2000),
    replicas: integer("replicas", values.replicas, 2, 2, 8),
    tag: values.tag ?? "latest",
    to: values.to,
    json: values.json,
    k8s: values.k8s,
    prometheus: values.prometheus?.replace(/\/+$/, ""),
    dryRun: values["dry-run"],
  };
}
