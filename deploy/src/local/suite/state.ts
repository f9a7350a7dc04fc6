// What the local suite runs, as data: its pods (each with a colour and an image tag), the store of
// each stateful service and the releases' history, kept in <data dir>/containers/state.json; and
// the DNS records the cluster DNS answers from, derived from it on every save.
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import { CLUSTER_DOMAIN, NAMESPACE } from "../../manifests/cluster-names.js";
import type { Colour } from "../../manifests/release-objects.js";
import type { Records } from "../cluster-dns.js";

/** The orchestrator's first replica, where the CLI and dashboard look. */
export const PUBLISHED_ADDRESS = "127.0.0.1";
const FIRST_POD_OCTET = 10;
const LAST_POD_OCTET = 254;
export const MAX_REPLICAS = 16;

export class SuiteError extends Error {
  override readonly name = "SuiteError";
}

export type Store = "sqlite" | "postgres";

export interface Pod {
  readonly name: string;
  readonly service: string;
  readonly index: number;
  readonly address: string;
  readonly container: string;
  readonly volume: string;
  /** The set the pod belongs to: blue from `up`, green the first release beside it, and so on in turn. */
  readonly colour: Colour;
  /** The image tag it runs. */
  readonly tag: string;
  /** Drained and stopped, kept for a rollback. */
  stopped?: boolean;
}

/** One set of a service's pods: a colour and the image tag it runs. */
export interface PodSet {
  readonly colour: Colour;
  readonly tag: string;
}

export interface ReleaseEvent {
  readonly kind: "release" | "rollback";
  /** ISO time of the flip. */
  readonly at: string;
  readonly from: PodSet;
  readonly to: PodSet;
}

export interface ServiceRelease {
  active: Colour;
  history: ReleaseEvent[];
}

export interface SuiteState {
  /** The tag `up` started the suite with; a released service's pods run the tags of their sets. */
  readonly tag: string;
  /** The store each stateful service was started with; it is kept while the suite runs. */
  stores: Record<string, Store>;
  postgres: { readonly dir: string; readonly address: string; readonly port: number } | undefined;
  dnsContainer: string | undefined;
  pods: Pod[];
  /** Services released blue-green at least once, by name. */
  releases: Record<string, ServiceRelease>;
}

export function emptyState(tag: string): SuiteState {
  return { tag, stores: {}, postgres: undefined, dnsContainer: undefined, pods: [], releases: {} };
}

export function dnsName(service: string): string {
  return `${service}.${NAMESPACE}.svc.${CLUSTER_DOMAIN}`;
}

/** The name that answers the pods of a service's other colour while they run (its Kubernetes preview Service). */
export function previewName(service: string): string {
  return `${service}-preview`;
}

export function activeColour(state: SuiteState, service: string): Colour {
  return state.releases[service]?.active ?? "blue";
}

/** The pods a service's name answers: those of its active colour. */
export function activePods(state: SuiteState, service: string): Pod[] {
  const colour = activeColour(state, service);
  return state.pods.filter((p) => p.service === service && p.colour === colour).sort((a, b) => a.index - b.index);
}

/** The tag new pods of a service's active set run: that set's, or the suite's. */
export function activeTag(state: SuiteState, service: string): string {
  return activePods(state, service)[0]?.tag ?? state.tag;
}

export function newPod(spec: ServiceSpec, index: number, used: Set<string>, set: PodSet): Pod {
  // Blue keeps the names `up` gives; the other colour's pods say theirs.
  const name = set.colour === "blue" ? `${spec.name}-${index}` : `${spec.name}-${set.colour}-${index}`;
  let address = PUBLISHED_ADDRESS;
  if (!(spec.kind === "orchestrator" && index === 0)) {
    let octet = FIRST_POD_OCTET;
    while (used.has(`127.0.0.${octet}`)) octet += 1;
    if (octet > LAST_POD_OCTET) throw new SuiteError("no loopback address left for another pod");
    address = `127.0.0.${octet}`;
  }
  used.add(address);
  return {
    name,
    service: spec.name,
    index,
    address,
    container: `loopguard-${name}`,
    volume: `loopguard-${name}-data`,
    colour: set.colour,
    tag: set.tag,
  };
}

/** The suite's folder: its state, the DNS records and resolv.conf the pods mount, its staged secrets. */
export class SuiteFiles {
  readonly stateDir: string;
  readonly recordsFile: string;
  readonly resolvConf: string;
  readonly #stateFile: string;

  constructor(dataDir: string) {
    this.stateDir = join(dataDir, "containers");
    this.recordsFile = join(this.stateDir, "dns-records.json");
    this.resolvConf = join(this.stateDir, "resolv.conf");
    this.#stateFile = join(this.stateDir, "state.json");
  }

  read(): SuiteState | undefined {
    if (!existsSync(this.#stateFile)) return undefined;
    const state = JSON.parse(readFileSync(this.#stateFile, "utf8")) as SuiteState;
    // A state written before releases existed: every pod is blue and runs the suite's tag.
    state.releases ??= {};
    state.pods = state.pods.map((pod) => ({ ...pod, colour: pod.colour ?? "blue", tag: pod.tag ?? state.tag }));
    return state;
  }

  /** Writes the state, then the records: a pod joins its name once it is in the state (SERVING). */
  save(state: SuiteState): void {
    writeAtomically(this.#stateFile, `${JSON.stringify(state, null, 2)}\n`);
    const records: Record<string, string[]> = {};
    for (const pod of state.pods.filter((p) => !p.stopped)) {
      const name = pod.colour === activeColour(state, pod.service) ? pod.service : previewName(pod.service);
      records[name] = [...(records[name] ?? []), pod.address];
    }
    if (state.postgres) records.postgres = [state.postgres.address];
    writeAtomically(this.recordsFile, JSON.stringify(records satisfies Records));
  }
}

function writeAtomically(file: string, content: string): void {
  writeFileSync(`${file}.tmp`, content);
  renameSync(`${file}.tmp`, file);
}
