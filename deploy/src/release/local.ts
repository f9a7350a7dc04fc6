// A blue-green release of one tool on the local containers (`pnpm containers`), driving the
// blue-green model (blue-green.ts): the new set starts beside the live one with the same replica count, on its own loopback addresses; once
// every new pod is SERVING the release gate judges it (smoke calls and the SLO, local-gate.ts) and
// a set that fails is removed before any client reaches it; the cluster DNS then answers the
// tool's name with the new set; once no client holds a connection to the old set any more —
// clients leave it when the servers' max connection age sends them a GOAWAY and they resolve the
// name again — the gate judges the new set again on every client's calls, and a failure flips
// back to the old set, still running. Otherwise the old set is drained (SIGTERM: calls in flight
// finish) and its stopped containers are kept, so a rollback starts them again and flips back.
import { localKeyPaths, type ServiceSpec } from "@loopguard/tool-sdk";
import { ContainerSuite } from "../local/suite.js";
import { activeColour, activePods, dnsName, type Pod, type PodSet, type SuiteState } from "../local/suite/state.js";
import { imageRepository } from "../local/images.js";
import { type BlueGreenDriver, driveBlueGreen, type GateWhen, idleColour } from "./blue-green.js";
import { checkContracts, ReleaseRefused, toolContractPaths } from "./contract-gate.js";
import { type GateVerdict, releaseGateOf } from "./gate.js";
import { judgePods, type LocalGate, readingOf } from "./local-gate.js";
import { CLIENTS_MOVE_TIMEOUT_MS, untilAnswered, untilClientsLeft } from "./local-clients.js";
import type { Reading } from "./local-measure.js";
import { migrationGate } from "./migration-gate.js";
import { between, type ReleaseKind, type ReleaseResult } from "./result.js";

export interface LocalReleaseOptions {
  readonly root: string;
  readonly dataDir: string;
  readonly services: readonly ServiceSpec[];
  readonly tool: string;
  /** The image tag to release; absent for a rollback. */
  readonly to?: string;
  readonly rollback?: boolean;
  readonly dryRun?: boolean;
  readonly log: (line: string) => void;
}

const describePods = (pods: readonly Pod[]) => pods.map((p) => `${p.name}@${p.address}`);

/** What each gate judges, and what a failure of it leaves. */
const JUDGED: Record<GateWhen, string> = {
  "before the flip": "smoke calls only",
  "after the flip": "every client's calls and smoke calls",
};
const UNDONE: Record<GateWhen, (live: string, idle: string) => string> = {
  "before the flip": (live) => `its pods are removed and the ${live} set stays live`,
  "after the flip": (live, idle) => `rolled back, the ${live} set is live again and the ${idle} pods are removed`,
};

interface Plan {
  readonly spec: ServiceSpec;
  readonly kind: ReleaseKind;
  readonly from: PodSet & { readonly pods: Pod[] };
  readonly to: PodSet;
}

function gateOf(options: LocalReleaseOptions, spec: ServiceSpec): LocalGate {
  return {
    ...releaseGateOf(options.root, options.services, spec.name),
    keyFile: localKeyPaths(options.dataDir).smoke,
    grpcPort: spec.port,
    metricsPort: spec.metricsPort,
  };
}

function logVerdict(log: (line: string) => void, when: string, verdict: GateVerdict): void {
  log(`gate ${when}: ${verdict.passed ? "passed" : "FAILED"}`);
  for (const line of verdict.findings) log(`  ${line}`);
}

/** Switches the tool's name to `to` and waits until the cluster DNS answers with its pods. */
async function flip(
  suite: ContainerSuite,
  spec: ServiceSpec,
  kind: ReleaseKind,
  from: PodSet,
  to: PodSet,
  pods: readonly Pod[],
): Promise<string> {
  suite.activate(spec.name, { kind, at: new Date().toISOString(), from, to });
  await untilAnswered(
    dnsName(spec.name),
    pods.map((p) => p.address),
  );
  return new Date().toISOString();
}

function plan(suite: ContainerSuite, options: LocalReleaseOptions): Plan {
  const spec = options.services.find((s) => s.name === options.tool);
  if (!spec)
    throw new ReleaseRefused(
      `unknown tool "${options.tool}" (tools: ${options.services
        .filter((s) => s.kind === "tool")
        .map((s) => s.name)
        .join(", ")})`,
    );
  if (spec.kind !== "tool")
    throw new ReleaseRefused(
      `${spec.name} is not a tool: blue-green releases are per tool (scale the orchestrator with \`pnpm containers up\`)`,
    );
  const state: SuiteState | undefined = suite.readState();
  const live = state ? activePods(state, spec.name).filter((p) => !p.stopped) : [];
  if (!state || live.length === 0)
    throw new ReleaseRefused(`${spec.name} is not running: \`pnpm containers up\` first`);
  if (spec.stateful && state.stores[spec.name] !== "postgres") {
    throw new ReleaseRefused(
      `${spec.name} keeps its state in SQLite inside its pod: a second set would have a store of its own. Run it on PostgreSQL: ` +
        `\`pnpm containers down\`, then \`pnpm containers up --replicas ${spec.name}=2\``,
    );
  }
  const from = { colour: activeColour(state, spec.name), tag: live[0]!.tag, pods: live };
  const idle = idleColour(from.colour);
  if (options.rollback) {
    const kept = state.pods.filter((p) => p.service === spec.name && p.colour === idle);
    if (kept.length === 0)
      throw new ReleaseRefused(`nothing to roll back to: ${spec.name} has no previous set (its ${idle} pods)`);
    return { spec, kind: "rollback", from, to: { colour: idle, tag: kept[0]!.tag } };
  }
  if (!options.to) throw new ReleaseRefused("a release needs --to <image tag>");
  if (options.to === from.tag)
    throw new ReleaseRefused(`${spec.name} already runs ${imageRepository(spec.name)}:${from.tag}`);
  return { spec, kind: "release", from, to: { colour: idle, tag: options.to } };
}

export async function releaseLocal(options: LocalReleaseOptions): Promise<ReleaseResult> {
  const suite = new ContainerSuite({
    root: options.root,
    dataDir: options.dataDir,
    services: options.services,
    log: options.log,
  });
  const { spec, kind, from, to } = plan(suite, options);
  const image = (tag: string) => `${imageRepository(spec.name)}:${tag}`;
  const started = new Date();
  // A rollback returns to contracts that were live before this release, so only releases are gated.
  if (kind === "release") {
    const paths = toolContractPaths(spec.name);
    options.log(
      `contract gate: buf breaking of ${image(to.tag)} against the live ${image(from.tag)} (${paths.join(", ")})`,
    );
    await checkContracts({
      root: options.root,
      tool: spec.name,
      live: image(from.tag),
      candidate: image(to.tag),
      paths,
      pull: false,
    });
    options.log("contract gate: compatible");
    if (spec.stateful)
      await migrationGate(options.log, {
        live: image(from.tag),
        candidate: image(to.tag),
        pull: false,
        colour: from.colour,
      });
  }
  const fromSet = { colour: from.colour, image: image(from.tag), pods: describePods(from.pods) };
  if (options.dryRun) {
    return {
      tool: spec.name,
      kind,
      target: "containers",
      dryRun: true,
      from: fromSet,
      to: { colour: to.colour, image: image(to.tag), pods: [] },
      startedAt: started.toISOString(),
      timings: { totalMs: 0 },
    };
  }

  options.log(
    `starting ${from.pods.length} ${to.colour} pod(s) of ${image(to.tag)} beside the live ${from.colour} set`,
  );
  const starting = new Date().toISOString();
  const live = { colour: from.colour, tag: from.tag };
  const gate = kind === "release" ? gateOf(options, spec) : undefined;
  const verdicts: Partial<Record<GateWhen, GateVerdict & { readonly smokeCalls: number }>> = {};
  let pods: Pod[] = [];
  let sinceFlip: Reading | undefined;
  let flippedAt = "";
  let left = 0;
  const driver: BlueGreenDriver<Promise<void>> = {
    async start() {
      pods = await suite.startSet(spec.name, to, from.pods.length);
    },
    async gate(when) {
      const verdict = await judgePods(gate!, pods, when === "after the flip" ? sinceFlip : undefined);
      verdicts[when] = verdict;
      logVerdict(options.log, `${when} (${JUDGED[when]})`, verdict);
      if (verdict.passed) return;
      if (when === "after the flip") {
        await flip(suite, spec, "rollback", to, live, from.pods);
        options.log(
          `rolled back: ${dnsName(spec.name)} answers the ${from.colour} set again; draining the ${to.colour} set once clients left it`,
        );
        await untilClientsLeft(
          pods.map((p) => p.address),
          spec.port,
        );
      }
      await suite.removeSet(spec.name, to.colour);
      throw new ReleaseRefused(
        `${image(to.tag)} failed the release gate ${when}: ${verdict.findings[0]}; ${UNDONE[when](from.colour, to.colour)}`,
        verdict.findings.slice(1).join("\n"),
      );
    },
    async flip() {
      flippedAt = await flip(suite, spec, kind, live, to, pods);
      sinceFlip = gate ? await readingOf(gate, pods) : undefined;
      options.log(
        `flipped: ${dnsName(spec.name)} answers the ${to.colour} set (${describePods(pods).join(", ")}); waiting for clients to leave the ${from.colour} set`,
      );
    },
    async clientsMove() {
      left = await untilClientsLeft(
        from.pods.map((p) => p.address),
        spec.port,
      );
    },
    async drain() {
      options.log(
        left === 0
          ? `no client connection left on the ${from.colour} set; draining it`
          : `${left} client connection(s) still on the ${from.colour} set after ${CLIENTS_MOVE_TIMEOUT_MS / 1000} s; draining it anyway`,
      );
      await suite.stopSet(spec.name, from.colour);
    },
  };
  const ended = await driveBlueGreen(driver, gate !== undefined);
  const servingAt = ended.start!;
  const gatedAt = ended["gate before the flip"] ?? servingAt;
  const clientsMovedAt = ended["clients move"]!;
  const judgedAt = ended["gate after the flip"] ?? clientsMovedAt;
  const drainedAt = ended.drain!;
  options.log(`drained and stopped the ${from.colour} set (kept for \`pnpm release ${spec.name} --rollback\`)`);

  const startedAt = started.toISOString();
  const { "before the flip": beforeFlip, "after the flip": afterFlip } = verdicts;
  return {
    tool: spec.name,
    kind,
    target: "containers",
    dryRun: false,
    from: fromSet,
    to: { colour: to.colour, image: image(to.tag), pods: describePods(pods) },
    startedAt,
    servingAt,
    flippedAt,
    clientsMovedAt,
    drainedAt,
    clientsLeftAtDrain: left,
    timings: {
      startMs: between(starting, servingAt),
      ...(gate ? { gateMs: between(servingAt, gatedAt)! + between(clientsMovedAt, judgedAt)! } : {}),
      flipMs: between(gatedAt, flippedAt),
      clientsMovedMs: between(flippedAt, clientsMovedAt),
      drainMs: between(judgedAt, drainedAt),
      totalMs: between(startedAt, drainedAt)!,
    },
    ...(beforeFlip && afterFlip
      ? {
          gate: {
            beforeFlip: beforeFlip.findings,
            afterFlip: afterFlip.findings,
            smokeCalls: beforeFlip.smokeCalls + afterFlip.smokeCalls,
          },
        }
      : {}),
  };
}
