// `pnpm containers`: the suite run from its images, one container per "pod", the way a cluster
// runs it. Every pod uses the host's network and binds its own loopback address (127.0.0.10 and
// up; 0.0.0.0 would collide), so several replicas of a service listen on the same ports as in
// Kubernetes. A small DNS (suite/dns.ts) answers the namespace's names with every replica's
// address, as headless Services do, and the orchestrator reaches tools by
// dns:///<tool>.loopguard.svc.cluster.local:<port>. The orchestrator's first replica binds
// 127.0.0.1, so its API (50051) and HTTP port (8080) are where `pnpm loopguard` expects them.
//
// What runs is kept in <data dir>/containers/state.json (suite/state.ts), so `down` and a later `up`
// (which scales: adds and removes replicas, restarts stopped pods, leaves the rest alone) know it.
//
// Blue-green releases (deploy/src/ops/release) run a second set of a tool's pods beside the live one:
// each pod has a colour and an image tag; the tool's name answers the active colour's pods only,
// `<tool>-preview` the other colour's running pods, as the Kubernetes paths' Services do.
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import type { ServiceSpec } from "@loopguard/tool-sdk";
import type { Colour } from "../manifests/release-objects.js";
import { docker, imageExists, requireDockerEngine } from "./docker.js";
import { BASE_IMAGE, imageRepository } from "./images.js";
import { ensurePostgres, stopPostgres, storeFor } from "./suite/database.js";
import { ensureClusterDns, resolvConf } from "./suite/dns.js";
import { requireNoOtherSuite, SUITE_LABEL } from "./suite/others.js";
import { Pods, type SuiteOptions } from "./suite/pods.js";
import {
  activeColour,
  activePods,
  activeTag,
  emptyState,
  MAX_REPLICAS,
  newPod,
  type Pod,
  type PodSet,
  type ReleaseEvent,
  type ServiceRelease,
  SuiteError,
  SuiteFiles,
  type SuiteState,
} from "./suite/state.js";

export interface UpOptions {
  /** Replicas per service; services not named keep their count (1 for a new suite). */
  readonly replicas: ReadonlyMap<string, number>;
  readonly tag?: string;
}

export class ContainerSuite {
  readonly stateDir: string;
  readonly #files: SuiteFiles;
  readonly #label: string;
  readonly #pods: Pods;

  constructor(private readonly options: SuiteOptions) {
    this.#files = new SuiteFiles(options.dataDir);
    this.stateDir = this.#files.stateDir;
    this.#label = `${SUITE_LABEL}=${this.stateDir}`;
    this.#pods = new Pods(options, this.#files, this.#label);
  }

  readState(): SuiteState | undefined {
    return this.#files.read();
  }

  #spec(service: string): ServiceSpec {
    const spec = this.options.services.find((s) => s.name === service);
    if (!spec)
      throw new SuiteError(
        `unknown service "${service}" (services: ${this.options.services.map((s) => s.name).join(", ")})`,
      );
    return spec;
  }

  async up(options: UpOptions): Promise<SuiteState> {
    for (const [service, count] of options.replicas) {
      this.#spec(service);
      if (!Number.isInteger(count) || count < 0 || count > MAX_REPLICAS)
        throw new SuiteError(`--replicas ${service}=${count}: a count in 0..${MAX_REPLICAS}`);
    }
    await requireDockerEngine();
    // Before anything starts: the other suite's DNS would answer this one's names with its records.
    await requireNoOtherSuite(this.stateDir);
    const previous = this.readState();
    const tag = options.tag ?? previous?.tag ?? "latest";
    if (previous && previous.tag !== tag) {
      throw new SuiteError(
        `the suite runs images tagged "${previous.tag}"; \`pnpm containers down\` first to run "${tag}"`,
      );
    }
    const state = previous ?? emptyState(tag);
    const desired = new Map(
      this.options.services.map((s) => [
        s.name,
        options.replicas.get(s.name) ?? (previous ? activePods(state, s.name).length : 1),
      ]),
    );

    // Every refusal before anything starts.
    for (const spec of this.options.services) {
      const count = desired.get(spec.name)!;
      const store = storeFor(spec, state, count);
      if (store) state.stores[spec.name] = store;
      const image = `${imageRepository(spec.name)}:${activeTag(state, spec.name)}`;
      if (count > 0 && !(await imageExists(image)))
        throw new SuiteError(`image ${image} is missing: run \`pnpm images\` first`);
    }
    if (!(await imageExists(BASE_IMAGE)))
      throw new SuiteError(`image ${BASE_IMAGE} is missing: run \`pnpm images\` first`);

    // Readable to the DNS container's user; the secrets inside have a folder of their own.
    mkdirSync(this.stateDir, { recursive: true, mode: 0o755 });
    this.#files.save(state);
    writeFileSync(this.#files.resolvConf, resolvConf());
    await ensureClusterDns({ root: this.options.root, label: this.#label, files: this.#files }, state);
    if (Object.values(state.stores).includes("postgres")) await ensurePostgres(this.#files, state, this.options.log);

    // Fewer replicas: out of DNS first (as endpoints are), then drained and removed. A released
    // service scales its active set; the other colour is the release's to keep or remove.
    const surplus = state.pods.filter(
      (pod) => pod.colour === activeColour(state, pod.service) && pod.index >= desired.get(pod.service)!,
    );
    if (surplus.length > 0) {
      state.pods = state.pods.filter((pod) => !surplus.includes(pod));
      this.#files.save(state);
      await Promise.all(surplus.map((pod) => this.#pods.remove(pod)));
      for (const pod of surplus) this.options.log(`removed ${pod.name}`);
    }
    // Tools before the orchestrator, which reaches them by name. A pod joins the DNS records
    // (the state) once it is SERVING, as a ready pod joins a Service's endpoints; `down` finds
    // the containers of an interrupted `up` by their label.
    const used = new Set(state.pods.map((p) => p.address));
    const ordered = [...this.options.services].sort(
      (a, b) => Number(a.kind === "orchestrator") - Number(b.kind === "orchestrator"),
    );
    for (const spec of ordered) {
      const set = { colour: activeColour(state, spec.name), tag: activeTag(state, spec.name) };
      const pods: Pod[] = [];
      for (let index = 0; index < desired.get(spec.name)!; index += 1) {
        const existing = state.pods.find(
          (p) => p.service === spec.name && p.colour === set.colour && p.index === index,
        );
        pods.push(existing ?? newPod(spec, index, used, set));
      }
      await this.#startPods(spec, state, set, pods, (p) => !state.pods.includes(p));
    }
    return state;
  }

  /** Migrates for the new ones among `pods`, starts them all, and makes them the service's `set` in the state. */
  async #startPods(spec: ServiceSpec, state: SuiteState, set: PodSet, pods: Pod[], isNew: (pod: Pod) => boolean) {
    await this.#pods.migrate(spec, state, set.tag, pods.filter(isNew));
    await Promise.all(pods.map((pod) => this.#pods.run(pod, spec, state)));
    state.pods = [...state.pods.filter((p) => p.service !== spec.name || p.colour !== set.colour), ...pods];
    this.#files.save(state);
  }

  #runningState(): SuiteState {
    const state = this.readState();
    if (!state) throw new SuiteError("nothing is up: `pnpm containers up` first");
    return state;
  }

  /**
   * Runs `count` pods of `service` from image tag `set.tag` as colour `set.colour`, beside the
   * live set and out of the service's name (they answer `<service>-preview`), and returns once
   * every one is SERVING. Kept pods of that colour are started again when they run that tag, and
   * replaced when they run another.
   */
  async startSet(service: string, set: PodSet, count: number): Promise<Pod[]> {
    const spec = this.#spec(service);
    const state = this.#runningState();
    if (set.colour === activeColour(state, service))
      throw new SuiteError(`${service}'s ${set.colour} pods are the live ones`);
    const image = `${imageRepository(service)}:${set.tag}`;
    if (!(await imageExists(image)))
      throw new SuiteError(`image ${image} is missing: run \`pnpm images --tag ${set.tag}\` first`);
    const stale = state.pods.filter(
      (p) => p.service === service && p.colour === set.colour && (p.tag !== set.tag || p.index >= count),
    );
    if (stale.length > 0) {
      state.pods = state.pods.filter((p) => !stale.includes(p));
      this.#files.save(state);
      await Promise.all(stale.map((pod) => this.#pods.remove(pod)));
    }
    const used = new Set(state.pods.map((p) => p.address));
    const pods: Pod[] = [];
    for (let index = 0; index < count; index += 1) {
      const kept = state.pods.find((p) => p.service === service && p.colour === set.colour && p.index === index);
      pods.push(kept ? { ...kept, stopped: false } : newPod(spec, index, used, set));
    }
    await this.#startPods(spec, state, set, pods, (p) => !state.pods.some((q) => q.container === p.container));
    return pods;
  }

  /** Points the service's name at `event.to`'s pods (the cluster DNS reads the records again on its next answer). */
  activate(service: string, event: ReleaseEvent): SuiteState {
    const state = this.#runningState();
    const release: ServiceRelease = state.releases[service] ?? { active: "blue", history: [] };
    state.releases[service] = release;
    release.active = event.to.colour;
    release.history.push(event);
    this.#files.save(state);
    return state;
  }

  /** Drains a set (SIGTERM: calls in flight finish) and keeps its stopped containers for a rollback. */
  async stopSet(service: string, colour: Colour): Promise<void> {
    const state = this.#runningState();
    const pods = state.pods.filter((p) => p.service === service && p.colour === colour && !p.stopped);
    await Promise.all(pods.map((pod) => this.#pods.stop(pod)));
    for (const pod of pods) pod.stopped = true;
    this.#files.save(state);
  }

  /** Drains and removes a set no one may roll back to: a release whose gate refused it. */
  async removeSet(service: string, colour: Colour): Promise<void> {
    const state = this.#runningState();
    const pods = state.pods.filter((p) => p.service === service && p.colour === colour);
    state.pods = state.pods.filter((p) => !pods.includes(p));
    this.#files.save(state);
    await Promise.all(pods.map((pod) => this.#pods.remove(pod)));
  }

  /** SIGKILLs a pod's process, as a crash would; it stays down until `restart`. */
  async kill(pod: Pod): Promise<void> {
    await this.#pods.kill(pod);
  }

  /** Starts a stopped pod again; resolves once it is SERVING. */
  async restart(pod: Pod): Promise<void> {
    await docker(["start", pod.container]);
    await this.#pods.untilServing(pod, this.#spec(pod.service));
  }

  /** Removes everything `up` made and says what it was; undefined when there was nothing. */
  async down(): Promise<string | undefined> {
    const state = this.readState();
    const labelled = async (kind: "ps" | "volume") =>
      (
        await docker([
          ...(kind === "ps" ? ["ps", "--all"] : ["volume", "ls"]),
          "--quiet",
          "--filter",
          `label=${this.#label}`,
        ])
      )
        .split("\n")
        .filter(Boolean);
    const containers = await labelled("ps");
    const volumes = await labelled("volume");
    if (!state && containers.length === 0 && volumes.length === 0 && !existsSync(this.stateDir)) return undefined;
    // The orchestrator first, so no session is sent to a tool that is going away.
    const pods = state?.pods ?? [];
    const orchestrators = pods.filter(
      (p) => this.options.services.find((s) => s.name === p.service)?.kind === "orchestrator",
    );
    await Promise.all(orchestrators.map((pod) => this.#pods.remove(pod)));
    await Promise.all(pods.filter((p) => !orchestrators.includes(p)).map((pod) => this.#pods.remove(pod)));
    const left = await labelled("ps");
    if (left.length > 0) await docker(["rm", "--force", ...left]);
    const leftVolumes = await labelled("volume");
    if (leftVolumes.length > 0) await docker(["volume", "rm", "--force", ...leftVolumes]);
    if (state) stopPostgres(state);
    rmSync(this.stateDir, { recursive: true, force: true });
    const removed = [
      `${pods.length} pod(s) with their volumes`,
      ...(state?.dnsContainer ? ["the cluster DNS"] : []),
      ...(state?.postgres ? ["PostgreSQL"] : []),
    ];
    return `removed ${removed.join(", ")} and ${this.stateDir}`;
  }
}
