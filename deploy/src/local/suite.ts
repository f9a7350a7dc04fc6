// `pnpm containers`: the suite run from its images, one container per "pod", the way a cluster
// runs it. Every pod uses the host's network and binds its own loopback address (127.0.0.10 and
// up; 0.0.0.0 would collide), so several replicas of a service listen on the same ports as in
// Kubernetes. A small DNS (cluster-dns.ts, in a container of its own) answers the namespace's
// names with every replica's address, as headless Services do; pods get a resolv.conf that points
// at it with the cluster's search domains, and the orchestrator reaches tools by
// dns:///<tool>.loopguard.svc.cluster.local:<port>. The orchestrator's first replica binds
// 127.0.0.1, so its API (50051) and HTTP port (8080) are where `pnpm loopguard` expects them.
//
// What runs is kept in <data dir>/containers/state.json, so `down` and a later `up` (which scales:
// adds and removes replicas, restarts stopped pods, leaves the rest alone) know it.
//
// Blue-green releases (deploy/src/release) run a second set of a tool's pods beside the live one:
// each pod has a colour and an image tag; the tool's name answers the active colour's pods only,
// `<tool>-preview` the other colour's running pods, as the Kubernetes paths' Services do.
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { promises as dns } from "node:dns";
import { createServer } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Health, HealthCheckResponse_ServingStatus } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { startPostgres, stopPostgresIn } from "@loopguard/sql-store/testing";
import { createRawClient, type ServiceSpec } from "@loopguard/tool-sdk";
import pg from "pg";
import { suiteEnvironment } from "@loopguard/supervisor/suite-env";
import { docker, imageExists, requireDockerEngine } from "./docker.js";
import { BASE_IMAGE, imageRepository } from "./images.js";
import type { Colour } from "../manifests/release-objects.js";
import { CLUSTER_DOMAIN, NAMESPACE } from "../manifests/cluster-names.js";
import { type Records, SEARCH_DOMAINS } from "./cluster-dns.js";

/** The numeric user of the images (deploy/docker/Dockerfile); staged secrets are made readable to it. */
const IMAGE_UID = 10001;
export const DNS_ADDRESS = "127.0.0.9";
const POSTGRES_ADDRESS = "127.0.0.8";
const POSTGRES_PORT = 5432;
/** The orchestrator's first replica, where the CLI and dashboard look. */
const PUBLISHED_ADDRESS = "127.0.0.1";
const FIRST_POD_OCTET = 10;
const LAST_POD_OCTET = 254;
export const MAX_REPLICAS = 16;
const SERVING_TIMEOUT_MS = 60_000;
/** docker stop waits this long before SIGKILL: longer than a service's drain (10 s by default). */
const STOP_TIMEOUT_S = 15;
/** Where a pod finds the file a `…_FILE` variable of the local suite names (keys, secrets). */
const SECRETS_TARGET = "/run/secrets/loopguard";

export class SuiteError extends Error {
  override readonly name = "SuiteError";
}

type Store = "sqlite" | "postgres";

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

export interface SuiteOptions {
  readonly root: string;
  readonly dataDir: string;
  readonly services: readonly ServiceSpec[];
  readonly log: (line: string) => void;
  /** What a run sets in a service's environment beyond what `pnpm start` gives it (e.g. a drill's session quota). */
  readonly envFor?: (spec: ServiceSpec) => Readonly<Record<string, string>>;
}

export interface UpOptions {
  /** Replicas per service; services not named keep their count (1 for a new suite). */
  readonly replicas: ReadonlyMap<string, number>;
  readonly tag?: string;
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

export class ContainerSuite {
  readonly stateDir: string;
  readonly #stateFile: string;
  readonly #recordsFile: string;
  readonly #label: string;

  constructor(private readonly options: SuiteOptions) {
    this.stateDir = join(options.dataDir, "containers");
    this.#stateFile = join(this.stateDir, "state.json");
    this.#recordsFile = join(this.stateDir, "dns-records.json");
    this.#label = `io.loopguard.containers=${this.stateDir}`;
  }

  readState(): SuiteState | undefined {
    if (!existsSync(this.#stateFile)) return undefined;
    const state = JSON.parse(readFileSync(this.#stateFile, "utf8")) as SuiteState;
    // A state written before releases existed: every pod is blue and runs the suite's tag.
    state.releases ??= {};
    state.pods = state.pods.map((pod) => ({ ...pod, colour: pod.colour ?? "blue", tag: pod.tag ?? state.tag }));
    return state;
  }

  #save(state: SuiteState): void {
    writeAtomically(this.#stateFile, `${JSON.stringify(state, null, 2)}\n`);
    const records: Record<string, string[]> = {};
    for (const pod of state.pods.filter((p) => !p.stopped)) {
      const name = pod.colour === activeColour(state, pod.service) ? pod.service : previewName(pod.service);
      records[name] = [...(records[name] ?? []), pod.address];
    }
    if (state.postgres) records.postgres = [state.postgres.address];
    writeAtomically(this.#recordsFile, JSON.stringify(records satisfies Records));
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
    const previous = this.readState();
    const tag = options.tag ?? previous?.tag ?? "latest";
    if (previous && previous.tag !== tag) {
      throw new SuiteError(
        `the suite runs images tagged "${previous.tag}"; \`pnpm containers down\` first to run "${tag}"`,
      );
    }
    const state: SuiteState = previous ?? {
      tag,
      stores: {},
      postgres: undefined,
      dnsContainer: undefined,
      pods: [],
      releases: {},
    };
    const desired = new Map(
      this.options.services.map((s) => [
        s.name,
        options.replicas.get(s.name) ?? (previous ? activePods(state, s.name).length : 1),
      ]),
    );

    // Every refusal before anything starts.
    for (const spec of this.options.services) {
      const count = desired.get(spec.name)!;
      const store = this.#storeFor(spec, state, count);
      if (store) state.stores[spec.name] = store;
      const image = `${imageRepository(spec.name)}:${this.#activeTag(state, spec.name)}`;
      if (count > 0 && !(await imageExists(image)))
        throw new SuiteError(`image ${image} is missing: run \`pnpm images\` first`);
    }
    if (!(await imageExists(BASE_IMAGE)))
      throw new SuiteError(`image ${BASE_IMAGE} is missing: run \`pnpm images\` first`);

    // Readable to the DNS container's user; the secrets inside have a folder of their own.
    mkdirSync(this.stateDir, { recursive: true, mode: 0o755 });
    this.#save(state);
    writeFileSync(
      join(this.stateDir, "resolv.conf"),
      `nameserver ${DNS_ADDRESS}\nsearch ${SEARCH_DOMAINS.join(" ")}\noptions ndots:5\n`,
    );
    await this.#ensureDns(state);
    if (Object.values(state.stores).includes("postgres")) await this.#ensurePostgres(state);

    // Fewer replicas: out of DNS first (as endpoints are), then drained and removed. A released
    // service scales its active set; the other colour is the release's to keep or remove.
    const surplus = state.pods.filter(
      (pod) => pod.colour === activeColour(state, pod.service) && pod.index >= desired.get(pod.service)!,
    );
    if (surplus.length > 0) {
      state.pods = state.pods.filter((pod) => !surplus.includes(pod));
      this.#save(state);
      await Promise.all(surplus.map((pod) => this.#removePod(pod)));
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
      const set = { colour: activeColour(state, spec.name), tag: this.#activeTag(state, spec.name) };
      const pods: Pod[] = [];
      for (let index = 0; index < desired.get(spec.name)!; index += 1) {
        const existing = state.pods.find(
          (p) => p.service === spec.name && p.colour === set.colour && p.index === index,
        );
        pods.push(existing ?? newPod(spec, index, used, set));
      }
      await this.#migrate(
        spec,
        state,
        set.tag,
        pods.filter((p) => !state.pods.includes(p)),
      );
      await Promise.all(pods.map((pod) => this.#run(pod, spec, state)));
      state.pods = [...state.pods.filter((p) => p.service !== spec.name || p.colour !== set.colour), ...pods];
      this.#save(state);
    }
    return state;
  }

  /** The tag new pods of a service's active set run: that set's, or the suite's. */
  #activeTag(state: SuiteState, service: string): string {
    return activePods(state, service)[0]?.tag ?? state.tag;
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
      this.#save(state);
      await Promise.all(stale.map((pod) => this.#removePod(pod)));
    }
    const used = new Set(state.pods.map((p) => p.address));
    const pods: Pod[] = [];
    for (let index = 0; index < count; index += 1) {
      const kept = state.pods.find((p) => p.service === service && p.colour === set.colour && p.index === index);
      pods.push(kept ? { ...kept, stopped: false } : newPod(spec, index, used, set));
    }
    await this.#migrate(
      spec,
      state,
      set.tag,
      pods.filter((p) => !state.pods.some((q) => q.container === p.container)),
    );
    await Promise.all(pods.map((pod) => this.#run(pod, spec, state)));
    state.pods = [...state.pods.filter((p) => p.service !== service || p.colour !== set.colour), ...pods];
    this.#save(state);
    return pods;
  }

  /** Points the service's name at `event.to`'s pods (the cluster DNS reads the records again on its next answer). */
  activate(service: string, event: ReleaseEvent): SuiteState {
    const state = this.#runningState();
    const release: ServiceRelease = state.releases[service] ?? { active: "blue", history: [] };
    state.releases[service] = release;
    release.active = event.to.colour;
    release.history.push(event);
    this.#save(state);
    return state;
  }

  /** Drains a set (SIGTERM: calls in flight finish) and keeps its stopped containers for a rollback. */
  async stopSet(service: string, colour: Colour): Promise<void> {
    const state = this.#runningState();
    const pods = state.pods.filter((p) => p.service === service && p.colour === colour && !p.stopped);
    await Promise.all(
      pods.map((pod) =>
        docker(["stop", "--time", String(STOP_TIMEOUT_S), pod.container], { timeoutMs: (STOP_TIMEOUT_S + 10) * 1000 }),
      ),
    );
    for (const pod of pods) pod.stopped = true;
    this.#save(state);
  }

  /** Drains and removes a set no one may roll back to: a release whose gate refused it. */
  async removeSet(service: string, colour: Colour): Promise<void> {
    const state = this.#runningState();
    const pods = state.pods.filter((p) => p.service === service && p.colour === colour);
    state.pods = state.pods.filter((p) => !pods.includes(p));
    this.#save(state);
    await Promise.all(pods.map((pod) => this.#removePod(pod)));
  }

  /** The store of a stateful service: PostgreSQL when it runs several replicas, SQLite in its pod otherwise. */
  #storeFor(spec: ServiceSpec, state: SuiteState, count: number): Store | undefined {
    if (!spec.stateful) return undefined;
    const current = state.stores[spec.name];
    if (count <= 1) return current ?? "sqlite";
    if (current === "sqlite" && activePods(state, spec.name).length > 0) {
      throw new SuiteError(
        `${spec.name} runs on SQLite in its pod; ${count} replicas need PostgreSQL: ` +
          `\`pnpm containers down\`, then \`pnpm containers up --replicas ${spec.name}=${count}\``,
      );
    }
    return "postgres";
  }

  /** Starts the pod's container unless it runs, then waits until it is SERVING. */
  async #run(pod: Pod, spec: ServiceSpec, state: SuiteState): Promise<void> {
    const status = await docker(["container", "inspect", "--format", "{{.State.Status}}", pod.container]).then(
      (s) => s.trim(),
      () => "missing",
    );
    if (status === "running") return;
    const started = performance.now();
    if (status !== "missing") {
      await docker(["start", pod.container]);
    } else {
      if (pod.address === PUBLISHED_ADDRESS) await requireFree(pod.address, [spec.port, spec.metricsPort]);
      await docker(["run", "--detach", ...this.#runArguments(pod, spec, state)]);
    }
    await this.#untilServing(pod, spec);
    this.options.log(
      `${pod.name} is SERVING on ${pod.address}:${spec.port} (${((performance.now() - started) / 1000).toFixed(1)} s after its container was started)`,
    );
  }

  /**
   * The migration step before a stateful service's new pods start, as a Job does on Kubernetes: a
   * one-off container of the pods' image running `migrate`, once for a PostgreSQL store, on each
   * new pod's own volume for SQLite. The pods themselves only check the schema.
   */
  async #migrate(spec: ServiceSpec, state: SuiteState, tag: string, newPods: readonly Pod[]): Promise<void> {
    if (!spec.stateful || newPods.length === 0) return;
    const image = `${imageRepository(spec.name)}:${tag}`;
    const volumes = state.stores[spec.name] === "postgres" ? [undefined] : newPods.map((p) => p.volume);
    for (const volume of volumes) {
      const started = performance.now();
      const { env, mounts } = this.#environment(spec, state);
      const data = volume
        ? ["--mount", `type=volume,src=${volume},dst=/data,volume-label=${this.#label}`]
        : ["--tmpfs", "/data"];
      const resolv = ["--mount", `type=bind,src=${join(this.stateDir, "resolv.conf")},dst=/etc/resolv.conf,readonly`];
      const args = [
        "run",
        "--rm",
        "--label",
        this.#label,
        "--network",
        "host",
        "--read-only",
        "--tmpfs",
        "/tmp",
        ...data,
        ...resolv,
        ...mounts,
      ];
      const output = await docker(
        [...args, ...Object.entries(env).flatMap(([key, value]) => ["--env", `${key}=${value}`]), image, "migrate"],
        { timeoutMs: 600_000 },
      ).catch((error: Error) => {
        throw new SuiteError(
          `the migration step of ${spec.name} (${image} migrate) failed; no pod of it started: ${error.message}`,
        );
      });
      this.options.log(
        `${output.trim()} (${volume ?? "PostgreSQL"}, ${((performance.now() - started) / 1000).toFixed(1)} s)`,
      );
    }
  }

  /** What a pod of the service gets in its environment, and the secret files it mounts. */
  #environment(spec: ServiceSpec, state: SuiteState): { env: Record<string, string>; mounts: string[] } {
    const env: Record<string, string> = {};
    const mounts: string[] = [];
    // What `pnpm start` gives this service (public keys to all, the signing key to the
    // orchestrator alone), with each file it names staged and mounted read-only.
    const suite = suiteEnvironment(this.options.dataDir);
    for (const [name, value] of Object.entries({ ...suite.env, ...suite.envFor?.(spec) })) {
      if (name === "LOOPGUARD_DATA_DIR") continue;
      if (!name.endsWith("_FILE")) {
        env[name] = value;
        continue;
      }
      env[name] = `${SECRETS_TARGET}/${name}`;
      mounts.push("--mount", `type=bind,src=${this.#stageSecret(name, value)},dst=${env[name]},readonly`);
    }
    Object.assign(env, this.options.envFor?.(spec));
    if (spec.kind === "orchestrator") {
      for (const tool of this.options.services.filter((s) => s.kind === "tool")) {
        env[`${tool.envPrefix}_ADDR`] = `dns:///${dnsName(tool.name)}:${tool.port}`;
      }
    }
    if (state.stores[spec.name] === "postgres") {
      env[`${spec.envPrefix}_STORE`] =
        `postgres://postgres@${dnsName("postgres")}:${POSTGRES_PORT}/${databaseOf(spec.name)}`;
    }
    // The migration step ran before the pod (#migrate): serving checks the schema, never migrates.
    if (spec.stateful) env[`${spec.envPrefix}_MIGRATE_ON_START`] = "false";
    return { env, mounts };
  }

  #runArguments(pod: Pod, spec: ServiceSpec, state: SuiteState): string[] {
    const { env, mounts } = this.#environment(spec, state);
    env[`${spec.envPrefix}_HOST`] = pod.address;
    if (spec.kind === "orchestrator") env.ORCHESTRATOR_INSTANCE_ID = pod.name;
    return [
      "--name",
      pod.container,
      "--label",
      this.#label,
      "--label",
      `io.loopguard.pod=${pod.name}`,
      "--network",
      "host",
      "--read-only",
      "--tmpfs",
      "/tmp",
      "--mount",
      `type=volume,src=${pod.volume},dst=/data,volume-label=${this.#label}`,
      "--mount",
      `type=bind,src=${join(this.stateDir, "resolv.conf")},dst=/etc/resolv.conf,readonly`,
      ...mounts,
      "--restart",
      "on-failure",
      "--stop-timeout",
      String(STOP_TIMEOUT_S),
      ...Object.entries(env).flatMap(([key, value]) => ["--env", `${key}=${value}`]),
      `${imageRepository(spec.name)}:${pod.tag}`,
    ];
  }

  /** SIGKILLs a pod's process, as a crash would; `docker kill` leaves the restart policy out, so it stays down until `restart`. */
  async kill(pod: Pod): Promise<void> {
    await docker(["kill", "--signal", "KILL", pod.container]);
  }

  /** Starts a stopped pod again; resolves once it is SERVING. */
  async restart(pod: Pod): Promise<void> {
    await docker(["start", pod.container]);
    await this.#untilServing(pod, this.#spec(pod.service));
  }

  async #untilServing(pod: Pod, spec: ServiceSpec): Promise<void> {
    // Reconnect quickly while the process starts (grpc-js waits 1 s after a refused connection).
    const client = createRawClient(Health, `${pod.address}:${spec.port}`, {
      channelOptions: { "grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 100 },
    });
    const deadline = Date.now() + SERVING_TIMEOUT_MS;
    try {
      for (;;) {
        const reply = await client.check({ service: "" }, { deadline: 1000 }).catch(() => undefined);
        if (reply?.status === HealthCheckResponse_ServingStatus.SERVING) return;
        const status = (await docker(["container", "inspect", "--format", "{{.State.Status}}", pod.container])).trim();
        if (status === "exited" || status === "dead" || Date.now() > deadline) {
          const logs = await docker(["logs", "--tail", "8", pod.container]).catch(() => "");
          throw new SuiteError(
            `${pod.name} did not become SERVING (container ${status}); its last log lines:\n${logs.trim()}`,
          );
        }
        await sleep(100);
      }
    } finally {
      client.close();
    }
  }

  async #removePod(pod: Pod): Promise<void> {
    await docker(["stop", "--time", String(STOP_TIMEOUT_S), pod.container], {
      timeoutMs: (STOP_TIMEOUT_S + 10) * 1000,
    }).catch(() => undefined);
    await docker(["rm", "--force", pod.container]).catch(() => undefined);
    await docker(["volume", "rm", "--force", pod.volume]).catch(() => undefined);
  }

  /**
   * A copy of a local key or secret file that only the images' user can read: the original is
   * the operator's (private keys are 0600), and a bind mount keeps a file's owner.
   */
  #stageSecret(name: string, source: string): string {
    const dir = join(this.stateDir, "secrets");
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const staged = join(dir, name);
    rmSync(staged, { force: true });
    copyFileSync(source, staged);
    if (process.getuid?.() === 0) {
      chownSync(staged, IMAGE_UID, IMAGE_UID);
      chmodSync(staged, 0o400);
    } else {
      // Not root: the copy cannot change owner, so it is readable to all, inside a 0700 folder.
      chmodSync(staged, 0o444);
    }
    return staged;
  }

  async #ensureDns(state: SuiteState): Promise<void> {
    const container = "loopguard-cluster-dns";
    const status = await docker(["container", "inspect", "--format", "{{.State.Status}}", container]).then(
      (s) => s.trim(),
      () => "missing",
    );
    if (status !== "running") {
      await docker(["rm", "--force", container]).catch(() => undefined);
      // The repository and the state folder are mounted read-only at their own paths: the DNS
      // runs this package's built code with its node_modules (pnpm's links are relative).
      await docker([
        "run",
        "--detach",
        "--name",
        container,
        "--label",
        this.#label,
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
        `type=bind,src=${this.options.root},dst=${this.options.root},readonly`,
        "--mount",
        `type=bind,src=${this.stateDir},dst=${this.stateDir},readonly`,
        BASE_IMAGE,
        "node",
        join(this.options.root, "deploy", "dist", "local", "cluster-dns-main.js"),
        DNS_ADDRESS,
        "53",
        this.#recordsFile,
      ]);
    }
    state.dnsContainer = container;
    this.#save(state);
    const deadline = Date.now() + 20_000;
    while (!(await dnsAnswers(DNS_ADDRESS))) {
      if (Date.now() > deadline) {
        const logs = await docker(["logs", "--tail", "5", container]).catch(() => "");
        throw new SuiteError(`the cluster DNS on ${DNS_ADDRESS}:53 does not answer; its log:\n${logs.trim()}`);
      }
      await sleep(100);
    }
  }

  /** A PostgreSQL for the services whose replicas share a store, with a database for each. */
  async #ensurePostgres(state: SuiteState): Promise<void> {
    if (!state.postgres) {
      const dir = join(this.stateDir, "postgres");
      await requireFree(POSTGRES_ADDRESS, [POSTGRES_PORT]);
      await startPostgres({ dir, host: POSTGRES_ADDRESS, port: POSTGRES_PORT, fsync: true });
      state.postgres = { dir, address: POSTGRES_ADDRESS, port: POSTGRES_PORT };
      this.#save(state);
      this.options.log(`PostgreSQL on ${POSTGRES_ADDRESS}:${POSTGRES_PORT} (${dnsName("postgres")})`);
    }
    const client = new pg.Client({
      connectionString: `postgres://postgres@${state.postgres.address}:${state.postgres.port}/postgres`,
    });
    await client.connect();
    try {
      for (const [service, store] of Object.entries(state.stores)) {
        const database = databaseOf(service);
        const exists = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database]);
        if (store === "postgres" && exists.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`);
      }
    } finally {
      await client.end();
    }
  }

  /** Removes everything `up` made and says what it was; undefined when there was nothing. */
  async down(): Promise<string | undefined> {
    const state = this.readState();
    const containers = (await docker(["ps", "--all", "--quiet", "--filter", `label=${this.#label}`]))
      .split("\n")
      .filter(Boolean);
    const volumes = (await docker(["volume", "ls", "--quiet", "--filter", `label=${this.#label}`]))
      .split("\n")
      .filter(Boolean);
    if (!state && containers.length === 0 && volumes.length === 0 && !existsSync(this.stateDir)) return undefined;
    // The orchestrator first, so no session is sent to a tool that is going away.
    const pods = state?.pods ?? [];
    const orchestrators = pods.filter(
      (p) => this.options.services.find((s) => s.name === p.service)?.kind === "orchestrator",
    );
    await Promise.all(orchestrators.map((pod) => this.#removePod(pod)));
    await Promise.all(pods.filter((p) => !orchestrators.includes(p)).map((pod) => this.#removePod(pod)));
    const left = (await docker(["ps", "--all", "--quiet", "--filter", `label=${this.#label}`]))
      .split("\n")
      .filter(Boolean);
    if (left.length > 0) await docker(["rm", "--force", ...left]);
    const leftVolumes = (await docker(["volume", "ls", "--quiet", "--filter", `label=${this.#label}`]))
      .split("\n")
      .filter(Boolean);
    if (leftVolumes.length > 0) await docker(["volume", "rm", "--force", ...leftVolumes]);
    if (state?.postgres) stopPostgresIn(state.postgres.dir);
    rmSync(this.stateDir, { recursive: true, force: true });
    const removed = [
      `${pods.length} pod(s) with their volumes`,
      ...(state?.dnsContainer ? ["the cluster DNS"] : []),
      ...(state?.postgres ? ["PostgreSQL"] : []),
    ];
    return `removed ${removed.join(", ")} and ${this.stateDir}`;
  }
}

function newPod(spec: ServiceSpec, index: number, used: Set<string>, set: PodSet): Pod {
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

function databaseOf(service: string): string {
  return service.replace(/[^a-z0-9]+/g, "_");
}

function writeAtomically(file: string, content: string): void {
  writeFileSync(`${file}.tmp`, content);
  renameSync(`${file}.tmp`, file);
}

/** Fails with one line when something already listens where a pod must. */
async function requireFree(host: string, ports: readonly number[]): Promise<void> {
  for (const port of ports) {
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, host, () => server.close(() => resolve(true)));
    });
    if (!free) throw new SuiteError(`${host}:${port} is in use (is \`pnpm start\` running?)`);
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
