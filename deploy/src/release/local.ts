// A blue-green release of one tool on the local containers (`pnpm containers`): the new set
// starts beside the live one with the same replica count, on its own loopback addresses; once
// every new pod is SERVING the release gate judges it (smoke calls and the SLO, local-gate.ts) and
// a set that fails is removed before any client reaches it; the cluster DNS then answers the
// tool's name with the new set; once no client holds a connection to the old set any more —
// clients leave it when the servers' max connection age sends them a GOAWAY and they resolve the
// name again — the gate judges the new set again on every client's calls, and a failure flips
// back to the old set, still running. Otherwise the old set is drained (SIGTERM: calls in flight
// finish) and its stopped containers are kept, so a rollback starts them again and flips back.
import { execFile } from "node:child_process";
import { promises as dns } from "node:dns";
import { setTimeout as sleep } from "node:timers/promises";
import { localKeyPaths, type ServiceSpec } from "@loopguard/tool-sdk";
import { activeColour, activePods, dnsName, type Pod, type PodSet, type SuiteState } from "../local/suite/state.js";
import { ContainerSuite } from "../local/suite.js";
import { DNS_ADDRESS } from "../local/suite/dns.js";
import { imageRepository } from "../local/images.js";
import { COLOURS } from "../manifests/release-objects.js";
import { checkContracts, ReleaseRefused, toolContractPaths } from "./contract-gate.js";
import { type GateVerdict, releaseGateOf } from "./gate.js";
import { migrationGate } from "./migration-gate.js";
import { judgePods, type LocalGate, readingOf } from "./local-gate.js";
import { between, type ReleaseKind, type ReleaseResult } from "./result.js";

/** How long clients get to leave the old set: max connection age with jitter, grpc-js's 30 s between resolutions, its subchannel pool's cleanup, a margin. */
const CLIENTS_MOVE_TIMEOUT_MS = 120_000;
/** No connection to the old set for this long: a client whose connection aged out would have reconnected within it. */
const QUIET_MS = 2_000;
const POLL_MS = 200;

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

const other = (set: PodSet) => COLOURS.find((c) => c !== set.colour)!;
const describePods = (pods: readonly Pod[]) => pods.map((p) => `${p.name}@${p.address}`);

/** Established TCP connections whose local end is one of `addresses` on `port` (the pods use the host's network). */
function connectionsTo(addresses: readonly string[], port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    execFile("ss", ["-Htn", "state", "established", `( sport = :${port} )`], { timeout: 10_000 }, (error, stdout) => {
      if (error) return reject(new ReleaseRefused(`cannot list connections with ss (iproute2): ${error.message}`));
      const local = new Set(addresses.map((a) => `${a}:${port}`));
      resolve(stdout.split("\n").filter((line) => local.has(line.trim().split(/\s+/)[2] ?? "")).length);
    });
  });
}

async function untilAnswered(name: string, addresses: readonly string[]): Promise<void> {
  const resolver = new dns.Resolver({ timeout: 500, tries: 1 });
  resolver.setServers([DNS_ADDRESS]);
  const expected = [...addresses].sort().join(",");
  const deadline = Date.now() + 10_000;
  for (;;) {
    const answer = await resolver.resolve4(name).catch(() => [] as string[]);
    if ([...answer].sort().join(",") === expected) return;
    if (Date.now() > deadline)
      throw new ReleaseRefused(
        `the cluster DNS still answers ${name} with ${answer.join(", ") || "nothing"}, not ${expected}`,
      );
    await sleep(50);
  }
}

/** Waits until no connection to the old set is left for QUIET_MS; returns how many remain at the timeout. */
async function untilClientsLeft(addresses: readonly string[], port: number): Promise<number> {
  const deadline = Date.now() + CLIENTS_MOVE_TIMEOUT_MS;
  let quietSince: number | undefined;
  for (;;) {
    const open = await connectionsTo(addresses, port);
    const now = Date.now();
    quietSince = open === 0 ? (quietSince ?? now) : undefined;
    if (quietSince !== undefined && now - quietSince >= QUIET_MS) return 0;
    if (now > deadline) return open;
    await sleep(POLL_MS);
  }
}

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
  const idle = other(from);
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
  const pods = await suite.startSet(spec.name, to, from.pods.length);
  const servingAt = new Date().toISOString();
  const gate = kind === "release" ? gateOf(options, spec) : undefined;
  let beforeFlip: Awaited<ReturnType<typeof judgePods>> | undefined;
  if (gate) {
    beforeFlip = await judgePods(gate, pods);
    logVerdict(options.log, "before the flip (smoke calls only)", beforeFlip);
    if (!beforeFlip.passed) {
      await suite.removeSet(spec.name, to.colour);
      throw new ReleaseRefused(
        `${image(to.tag)} failed the release gate before the flip: ${beforeFlip.findings[0]}; its pods are removed and the ${from.colour} set stays live`,
        beforeFlip.findings.slice(1).join("\n"),
      );
    }
  }
  const gatedAt = new Date().toISOString();
  const flippedAt = await flip(suite, spec, kind, { colour: from.colour, tag: from.tag }, to, pods);
  const sinceFlip = gate ? await readingOf(gate, pods) : undefined;
  options.log(
    `flipped: ${dnsName(spec.name)} answers the ${to.colour} set (${describePods(pods).join(", ")}); waiting for clients to leave the ${from.colour} set`,
  );

  const left = await untilClientsLeft(
    from.pods.map((p) => p.address),
    spec.port,
  );
  const clientsMovedAt = new Date().toISOString();
  let afterFlip: Awaited<ReturnType<typeof judgePods>> | undefined;
  if (gate) {
    afterFlip = await judgePods(gate, pods, sinceFlip);
    logVerdict(options.log, "after the flip (every client's calls and smoke calls)", afterFlip);
    if (!afterFlip.passed) {
      await flip(suite, spec, "rollback", to, { colour: from.colour, tag: from.tag }, from.pods);
      options.log(
        `rolled back: ${dnsName(spec.name)} answers the ${from.colour} set again; draining the ${to.colour} set once clients left it`,
      );
      await untilClientsLeft(
        pods.map((p) => p.address),
        spec.port,
      );
      await suite.removeSet(spec.name, to.colour);
      throw new ReleaseRefused(
        `${image(to.tag)} failed the release gate after the flip: ${afterFlip.findings[0]}; rolled back, the ${from.colour} set is live again and the ${to.colour} pods are removed`,
        afterFlip.findings.slice(1).join("\n"),
      );
    }
  }
  const judgedAt = new Date().toISOString();
  options.log(
    left === 0
      ? `no client connection left on the ${from.colour} set; draining it`
      : `${left} client connection(s) still on the ${from.colour} set after ${CLIENTS_MOVE_TIMEOUT_MS / 1000} s; draining it anyway`,
  );
  await suite.stopSet(spec.name, from.colour);
  const drainedAt = new Date().toISOString();
  options.log(`drained and stopped the ${from.colour} set (kept for \`pnpm release ${spec.name} --rollback\`)`);

  const startedAt = started.toISOString();
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
