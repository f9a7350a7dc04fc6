// `pnpm containers up [--replicas SERVICE=N]… [--tag T]` / `pnpm containers down` /
// `pnpm containers status`: the suite from its images, one container per pod (see suite.ts).
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { discoverServices } from "@loopguard/tool-sdk";
import { runCli, UsageError } from "../cli.js";
import { checkTag } from "./images.js";
import { activeColour, activePods, dnsName, type SuiteState } from "./suite/state.js";
import { ContainerSuite } from "./suite.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const USAGE = "usage: pnpm containers up [--replicas SERVICE=N]… [--tag T] | down | status";

function replicasOf(values: readonly string[]): Map<string, number> {
  const replicas = new Map<string, number>();
  for (const value of values) {
    const match = /^([a-z0-9-]+)=(\d+)$/.exec(value);
    if (!match) throw new UsageError(`--replicas takes SERVICE=N (e.g. kb-search=3), got "${value}"`);
    replicas.set(match[1]!, Number(match[2]));
  }
  return replicas;
}

function describe(state: SuiteState, suite: ContainerSuite): string {
  const services = discoverServices(join(root, "services"));
  const rows = [...state.pods]
    .sort((a, b) => a.name.localeCompare(b.name, "en", { numeric: true }))
    .map((pod) => {
      const spec = services.find((s) => s.name === pod.service)!;
      const store = state.stores[pod.service] ? `  store ${state.stores[pod.service]}` : "";
      const role = pod.stopped ? "stopped" : pod.colour === activeColour(state, pod.service) ? "live" : "preview";
      const set = `  ${pod.colour} :${pod.tag} ${role}`;
      return `  ${pod.name.padEnd(16)} ${pod.address.padEnd(12)} grpc ${`${pod.address}:${spec.port}`.padEnd(18)} http://${pod.address}:${spec.metricsPort}/metrics${store}${set}`;
    });
  const names = [...new Set(state.pods.map((p) => p.service))].map((s) => dnsName(s)).join(", ");
  const releases = Object.entries(state.releases).map(([service, release]) => {
    const last = release.history.at(-1)!;
    const live = activePods(state, service)[0];
    return `  ${service}: ${release.active} live (loopguard/${service}:${live?.tag ?? last.to.tag}); last ${last.kind} at ${last.at} from ${last.from.colour} :${last.from.tag}`;
  });
  return [
    `loopguard containers (images loopguard/*:${state.tag}; state in ${suite.stateDir}):`,
    ...rows,
    `  cluster DNS 127.0.0.9:53 answers ${names}${state.postgres ? `, ${dnsName("postgres")}` : ""}`,
    ...(state.postgres
      ? [
          `  PostgreSQL ${state.postgres.address}:${state.postgres.port} for ${Object.keys(state.stores)
            .filter((s) => state.stores[s] === "postgres")
            .join(", ")}`,
        ]
      : []),
    ...(releases.length > 0
      ? ["blue-green releases (`pnpm release <tool> --rollback` switches back):", ...releases]
      : []),
    "  the orchestrator's API is 127.0.0.1:50051 and its dashboard http://127.0.0.1:8080 (`pnpm loopguard …` works as is)",
    "",
  ].join("\n");
}

async function main(): Promise<number> {
  const parsed = (() => {
    try {
      return parseArgs({
        options: { replicas: { type: "string", multiple: true }, tag: { type: "string" } },
        allowPositionals: true,
      });
    } catch (error) {
      throw new UsageError(`${(error as Error).message.split(". ")[0]}; ${USAGE}`);
    }
  })();

  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (rest.length > 0 || !command || !["up", "down", "status"].includes(command)) throw new UsageError(USAGE);
  if (command !== "up" && (values.replicas || values.tag))
    throw new UsageError(`--replicas and --tag belong to \`up\`; ${USAGE}`);
  const dataDir = resolve(process.env.LOOPGUARD_DATA_DIR || join(root, ".data"));
  const suite = new ContainerSuite({
    root,
    dataDir,
    services: discoverServices(join(root, "services")),
    log: (line) => process.stdout.write(`${line}\n`),
  });
  if (command === "up") {
    const state = await suite.up({
      replicas: replicasOf(values.replicas ?? []),
      ...(values.tag ? { tag: checkTag(values.tag) } : {}),
    });
    process.stdout.write(describe(state, suite));
  } else if (command === "down") {
    process.stdout.write(`${(await suite.down()) ?? "nothing is up"}\n`);
  } else {
    const state = suite.readState();
    process.stdout.write(state ? describe(state, suite) : "nothing is up\n");
  }
  return 0;
}

runCli("containers", main);
