// Where the local containers' clients are during a release: what the cluster DNS answers for a
// tool's name, and the TCP connections still open to a set of pods (they use the host's network).
import { execFile } from "node:child_process";
import { promises as dns } from "node:dns";
import { setTimeout as sleep } from "node:timers/promises";
import { DNS_ADDRESS } from "../../local/suite/dns.js";
import { ReleaseRefused } from "./contract-gate.js";

/** How long clients get to leave the old set: max connection age with jitter, the tool client's 5 s between resolutions, grpc-js's subchannel pool cleanup, a margin. */
export const CLIENTS_MOVE_TIMEOUT_MS = 120_000;
/** No connection to the old set for this long: a client whose connection aged out would have reconnected within it. */
const QUIET_MS = 2_000;
const POLL_MS = 200;

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

export async function untilAnswered(name: string, addresses: readonly string[]): Promise<void> {
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
export async function untilClientsLeft(addresses: readonly string[], port: number): Promise<number> {
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
