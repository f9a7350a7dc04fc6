// The local suite's cluster DNS: cluster-dns.ts in a container of its own on DNS_ADDRESS, answering
// from the records file the state writes, and the resolv.conf every pod mounts to use it. Hand-written
// rather than CoreDNS: the pods share the host's network, and no DNS image is among the suite's images.
import { promises as dns } from "node:dns";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { SEARCH_DOMAINS } from "../cluster-dns.js";
import { docker } from "../docker.js";
import { BASE_IMAGE } from "../images.js";
import { SUITE_LABEL } from "./others.js";
import { dnsName, type SuiteFiles, SuiteError, type SuiteState } from "./state.js";

export const DNS_ADDRESS = "127.0.0.9";
const DNS_CONTAINER = "loopguard-cluster-dns";
const DNS_START_TIMEOUT_MS = 20_000;

/** What a pod's /etc/resolv.conf says, as the kubelet writes it, with the cluster DNS as its server. */
export function resolvConf(): string {
  return `nameserver ${DNS_ADDRESS}\nsearch ${SEARCH_DOMAINS.join(" ")}\noptions ndots:5\n`;
}

/** Starts the cluster DNS unless it runs, and returns once it answers. */
export async function ensureClusterDns(
  context: { readonly root: string; readonly label: string; readonly files: SuiteFiles },
  state: SuiteState,
): Promise<void> {
  const { root, label, files } = context;
  // Reused only while it runs with this suite's label: another suite's would answer from its own records.
  const found = await docker([
    "container",
    "inspect",
    "--format",
    `{{.State.Status}} {{index .Config.Labels "${SUITE_LABEL}"}}`,
    DNS_CONTAINER,
  ]).then(
    (s) => s.trim(),
    () => "missing",
  );
  if (found !== `running ${files.stateDir}`) {
    await docker(["rm", "--force", DNS_CONTAINER]).catch(() => undefined);
    // The repository and the state folder are mounted read-only at their own paths: the DNS
    // runs this package's built code with its node_modules (pnpm's links are relative).
    await docker([
      "run",
      "--detach",
      "--name",
      DNS_CONTAINER,
      "--label",
      label,
      "--network",
      "host",
      "--read-only",
      "--cap-drop",
      "ALL",
      "--cap-add",
      "NET_BIND_SERVICE",
      "--restart",
      "on-failure",
      "--mount",
      `type=bind,src=${root},dst=${root},readonly`,
      "--mount",
      `type=bind,src=${files.stateDir},dst=${files.stateDir},readonly`,
      BASE_IMAGE,
      "node",
      join(root, "deploy", "dist", "local", "cluster-dns-main.js"),
      DNS_ADDRESS,
      "53",
      files.recordsFile,
    ]);
  }
  state.dnsContainer = DNS_CONTAINER;
  files.save(state);
  const deadline = Date.now() + DNS_START_TIMEOUT_MS;
  while (!(await dnsAnswers(DNS_ADDRESS))) {
    if (Date.now() > deadline) {
      const logs = await docker(["logs", "--tail", "5", DNS_CONTAINER]).catch(() => "");
      throw new SuiteError(`the cluster DNS on ${DNS_ADDRESS}:53 does not answer; its log:\n${logs.trim()}`);
    }
    await sleep(100);
  }
}

async function dnsAnswers(server: string): Promise<boolean> {
  const resolver = new dns.Resolver({ timeout: 500, tries: 1 });
  resolver.setServers([server]);
  try {
    await resolver.resolve4(dnsName("readiness-probe"));
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOTFOUND";
  }
}
