// Each drill scenario as a fault plan: data, a list of steps (start the load, wait for a trigger,
// inject a fault, hold it, restore, release, note) that plan-run.ts executes without knowing the
// scenario. What a run checks about side effects is the plan's too: money.ts's ledger audit.
// Adding a scenario is adding its plan here (and its name to options.ts), not a branch in the runner.
import type { DescService, MessageInitShape } from "@bufbuild/protobuf";
import { contractFiles } from "@loopguard/proto";
import type { FaultProfileSchema } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { methodPolicy, servicePolicy, servicesOf } from "@loopguard/tool-sdk";
import type { ReleaseKind } from "../release/result.js";
import { DrillError } from "./drill-error.js";
import type { Pace } from "./load.js";
import { moneyCheck } from "./money.js";
import type { DrillOptions } from "./options.js";
import type { KillMode } from "../../manifests/pod-chaos-objects.js";
import type { CheckContext, SideEffectsCheck } from "./side-effects-check.js";

export type FaultProfile = MessageInitShape<typeof FaultProfileSchema>;

/** A flap: down this long, then up this long (after SERVING), over and over. */
export const FLAP_DOWN_MS = 2000;
export const FLAP_UP_MS = 3000;
/** A session's wall clock beyond the fault; the run's bound is that plus a margin, so no healthy session counts as hung. */
const SESSION_BUDGET_EXTRA_MS = 60_000;
const BOUND_MARGIN_MS = 30_000;

export type Step =
  /** Starts the load (once: a later start-load is a no-op); `wait`: until every start is answered. */
  | { readonly do: "start-load"; readonly wait?: boolean }
  /** Waits until the load is under way: a tenth of the sessions ended, or offered the target calls. */
  | { readonly do: "trigger"; readonly on: "sessions-ended" | "calls-offered" }
  /** SIGKILLs the target's pods (one at random, or all); `restored: false` says in the timeline none comes back. */
  | { readonly do: "kill"; readonly pods: KillMode; readonly restored?: false }
  /** Brings back the pods the last kill took; a window in which every target pod was dead is a dead window. */
  | { readonly do: "restore" }
  /** Holds for `ms` or until every session ended; `capped`: not beyond the enclosing repeat's end. */
  | { readonly do: "hold"; readonly ms: number; readonly capped?: boolean }
  /** Runs `steps` over and over for `forMs` (while sessions run); notes "<cycles> <counted>". */
  | { readonly do: "repeat"; readonly forMs: number; readonly steps: readonly Step[]; readonly counted: string }
  /** Sets the fault profile of every target pod and marks `what` (`{pods}`: how many pods). */
  | { readonly do: "set-faults"; readonly profile: FaultProfile; readonly what: string }
  /** A blue-green release of the target (or the rollback), through the place's own release path. */
  | { readonly do: "release"; readonly kind: ReleaseKind; readonly to?: string; readonly announce: string }
  | { readonly do: "note"; readonly text: string };

export interface Plan {
  /** The service the faults are aimed at, and the gRPC service name its calls are counted under. */
  readonly target: { readonly service: string; readonly grpcService: string };
  readonly pace: Pace;
  /** Each session's wall-clock budget, and how long the run waits for every session to end. */
  readonly budgetMs: number;
  readonly boundMs: number;
  /** Every tool pod's profile outside a fault: the backend latency it stands in for. */
  readonly baseline: FaultProfile;
  readonly steps: readonly Step[];
  readonly sideEffects: (ctx: CheckContext) => Promise<SideEffectsCheck>;
}

/** The contract service of a tool, by its tool name. */
export function contractOf(tool: string): DescService {
  const service = servicesOf(contractFiles).find((s) => servicePolicy(s).toolName === tool);
  if (!service) throw new DrillError(`no contract names the tool "${tool}"`);
  return service;
}

/** The steps of each scenario. */
function stepsOf(options: DrillOptions, baseline: FaultProfile): Step[] {
  const { tool, kill, durationS } = options;
  const durationMs = durationS * 1000;
  // Every pod of a tool dies just before the sessions start: the calls of a burst are over within
  // a second, so killing as they start raced them. Any other tool fault waits for its calls.
  const underWay: Step[] = kill === "all" ? [] : [{ do: "start-load" }, { do: "trigger", on: "calls-offered" }];
  const killWindow = (downMs: number): Step[] => [
    { do: "kill", pods: kill },
    { do: "start-load" },
    { do: "hold", ms: downMs },
    { do: "restore" },
  ];
  switch (options.scenario) {
    case "kill-tool":
      return [
        ...underWay,
        ...killWindow(durationMs),
        ...(kill === "one"
          ? [
              {
                do: "note",
                text: `--kill one: ${tool} kept a live replica, so it was never dead and there is no dead-tool window`,
              } as const,
            ]
          : []),
      ];
    case "flap":
      return [
        ...underWay,
        {
          do: "repeat",
          forMs: durationMs,
          steps: [...killWindow(FLAP_DOWN_MS), { do: "hold", ms: FLAP_UP_MS, capped: true }],
          counted: `kill/restart cycle(s): down ${FLAP_DOWN_MS / 1000} s, then restarted and left up ${FLAP_UP_MS / 1000} s`,
        },
      ];
    case "kill-orchestrator":
      return [
        { do: "start-load", wait: true },
        { do: "trigger", on: "sessions-ended" },
        { do: "kill", pods: "one", restored: false },
      ];
    case "release":
      return [
        { do: "start-load" },
        { do: "release", kind: "release", to: options.to!, announce: `releasing ${tool} ${options.to} blue-green` },
        { do: "release", kind: "rollback", announce: `rolling ${tool} back` },
        {
          do: "note",
          text: `release: ${options.sessions} sessions started one by one over ${durationS} s, through the release and the rollback; a released set runs without the added backend latency`,
        },
      ];
    case "latency":
    case "errors": {
      const methods = contractOf(tool).methods;
      const method = methods.find((m) => m.name === options.method);
      return [
        { do: "start-load" },
        { do: "trigger", on: "calls-offered" },
        options.scenario === "latency"
          ? latency(options, method ?? methods[0]!)
          : errors(options, baseline, method?.name),
        { do: "hold", ms: durationMs },
        { do: "set-faults", profile: baseline, what: "faults cleared" },
      ];
    }
  }
}

/** The backend latency applies to that method only while the fault lasts: twice its contract's p95 target. */
function latency(options: DrillOptions, method: DescService["methods"][number]): Step {
  const target = methodPolicy(method).sla!.p95TargetMs;
  const profile = { addedLatencyMs: 2 * target, methods: [method.name] };
  return {
    do: "set-faults",
    profile,
    what: `${options.tool} ${method.name}: +${profile.addedLatencyMs} ms on every call (2 × its contract p95 target of ${target} ms) on {pods} pods`,
  };
}

function errors(options: DrillOptions, baseline: FaultProfile, method: string | undefined): Step {
  return {
    do: "set-faults",
    profile: { ...baseline, errorRate: options.errorRate, methods: method ? [method] : [] },
    what: `${options.tool}${method ? ` ${method}` : ""}: ${(options.errorRate * 100).toFixed(0)} % of calls fail UNAVAILABLE (injected) on {pods} pods`,
  };
}

/** The plan of the drill `options` describe; `firstTool`'s calls are counted when the target is not a tool. */
export function planOf(options: DrillOptions, firstTool: string): Plan {
  // A release starts its sessions one by one over --duration (a steady load that spans both flips
  // and both drains); every other scenario starts them at once and its fault lasts --duration.
  const pace: Pace = options.scenario === "release" ? "steady" : "burst";
  const durationMs = options.durationS * 1000;
  const budgetMs = pace === "steady" ? SESSION_BUDGET_EXTRA_MS : durationMs + SESSION_BUDGET_EXTRA_MS;
  // Every tool answers after its backend's latency, so sessions overlap as they do in production
  // instead of finishing in a few milliseconds on loopback; a restarted pod gets it again.
  const baseline = options.backendLatencyMs > 0 ? { addedLatencyMs: options.backendLatencyMs } : {};
  const contract = contractOf(options.scenario === "kill-orchestrator" ? firstTool : options.tool);
  return {
    target: { service: options.tool, grpcService: contract.typeName },
    pace,
    budgetMs,
    boundMs: (pace === "steady" ? durationMs : 0) + budgetMs + BOUND_MARGIN_MS,
    baseline,
    steps: stepsOf(options, baseline),
    sideEffects: moneyCheck,
  };
}
