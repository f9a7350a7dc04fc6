// A pod of the local suite is a container on the host's network bound to its own loopback address:
// started from its service's image with the suite's environment, its secrets and the cluster DNS's
// resolv.conf, counted ready once its gRPC health says SERVING, drained with SIGTERM on the way out.
import { setTimeout as sleep } from "node:timers/promises";
import { Health, HealthCheckResponse_ServingStatus } from "@loopguard/proto/gen/grpc/health/v1/health_pb";
import { suiteEnvironment } from "@loopguard/supervisor/suite-env";
import { createRawClient, type ServiceSpec } from "@loopguard/tool-sdk";
import { docker } from "../docker.js";
import { imageRepository } from "../images.js";
import { postgresUrl } from "./database.js";
import { requireFree } from "./ports.js";
import { SECRETS_TARGET, secretMount } from "./secrets.js";
import { dnsName, PUBLISHED_ADDRESS, type Pod, type SuiteFiles, SuiteError, type SuiteState } from "./state.js";

const SERVING_TIMEOUT_MS = 60_000;
/** docker stop waits this long before SIGKILL: longer than a service's drain (10 s by default). */
const STOP_TIMEOUT_S = 15;

export interface SuiteOptions {
  readonly root: string;
  readonly dataDir: string;
  readonly services: readonly ServiceSpec[];
  readonly log: (line: string) => void;
  /** What a run sets in a service's environment beyond what `pnpm start` gives it (e.g. a drill's session quota). */
  readonly envFor?: (spec: ServiceSpec) => Readonly<Record<string, string>>;
}

export class Pods {
  constructor(
    private readonly options: SuiteOptions,
    private readonly files: SuiteFiles,
    /** The docker label of everything the suite makes, so `down` finds it all. */
    private readonly label: string,
  ) {}

  /** Starts the pod's container unless it runs, then waits until it is SERVING. */
  async run(pod: Pod, spec: ServiceSpec, state: SuiteState): Promise<void> {
    const status = await containerStatus(pod.container);
    if (status === "running") return;
    const started = performance.now();
    if (status !== "missing") {
      await docker(["start", pod.container]);
    } else {
      if (pod.address === PUBLISHED_ADDRESS) await requireFree(pod.address, [spec.port, spec.metricsPort]);
      await docker(["run", "--detach", ...this.#runArguments(pod, spec, state)]);
    }
    await this.untilServing(pod, spec);
    this.options.log(
      `${pod.name} is SERVING on ${pod.address}:${spec.port} (${((performance.now() - started) / 1000).toFixed(1)} s after its container was started)`,
    );
  }

  /**
   * The migration step before a stateful service's new pods start, as a Job does on Kubernetes: a
   * one-off container of the pods' image running `migrate`, once for a PostgreSQL store, on each
   * new pod's own volume for SQLite. The pods themselves only check the schema.
   */
  async migrate(spec: ServiceSpec, state: SuiteState, tag: string, newPods: readonly Pod[]): Promise<void> {
    if (!spec.stateful || newPods.length === 0) return;
    const image = `${imageRepository(spec.name)}:${tag}`;
    const volumes = state.stores[spec.name] === "postgres" ? [undefined] : newPods.map((p) => p.volume);
    for (const volume of volumes) {
      const started = performance.now();
      const { env, mounts } = this.#environment(spec, state);
      const data = volume
        ? ["--mount", `type=volume,src=${volume},dst=/data,volume-label=${this.label}`]
        : ["--tmpfs", "/data"];
      const args = ["run", "--rm", ...this.#sandbox(), ...data, ...mounts, ...envArguments(env), image, "migrate"];
      const output = await docker(args, { timeoutMs: 600_000 }).catch((error: Error) => {
        throw new SuiteError(
          `the migration step of ${spec.name} (${image} migrate) failed; no pod of it started: ${error.message}`,
        );
      });
      this.options.log(
        `${output.trim()} (${volume ?? "PostgreSQL"}, ${((performance.now() - started) / 1000).toFixed(1)} s)`,
      );
    }
  }

  /** SIGKILLs a pod's process, as a crash would; `docker kill` leaves the restart policy out, so it stays down until `restart`. */
  async kill(pod: Pod): Promise<void> {
    await docker(["kill", "--signal", "KILL", pod.container]);
  }

  /** Drains a pod (SIGTERM: calls in flight finish) and keeps its stopped container. */
  async stop(pod: Pod): Promise<void> {
    await docker(["stop", "--time", String(STOP_TIMEOUT_S), pod.container], {
      timeoutMs: (STOP_TIMEOUT_S + 10) * 1000,
    });
  }

  /** Drains a pod, then removes its container and volume; what is already gone is no error. */
  async remove(pod: Pod): Promise<void> {
    await this.stop(pod).catch(() => undefined);
    await docker(["rm", "--force", pod.container]).catch(() => undefined);
    await docker(["volume", "rm", "--force", pod.volume]).catch(() => undefined);
  }

  async untilServing(pod: Pod, spec: ServiceSpec): Promise<void> {
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

  /** Every container of the suite: labelled, host network, read-only but /tmp, the cluster DNS's resolv.conf. */
  #sandbox(): string[] {
    const resolv = `type=bind,src=${this.files.resolvConf},dst=/etc/resolv.conf,readonly`;
    return ["--label", this.label, "--network", "host", "--read-only", "--tmpfs", "/tmp", "--mount", resolv];
  }

  /** What a pod of the service gets in its environment, and the secret files it mounts. */
  #environment(spec: ServiceSpec, state: SuiteState): { env: Record<string, string>; mounts: string[] } {
    const env: Record<string, string> = {};
    const mounts: string[] = [];
    // What `pnpm start` gives this service (public keys to all, the signing key to the
    // orchestrator alone), with each file it names staged and mounted read-only; no loopback addresses: the
    // suite's pods reach each other by the names given below.
    const suite = suiteEnvironment(this.options.dataDir, []);
    for (const [name, value] of Object.entries({ ...suite.env, ...suite.envFor?.(spec) })) {
      if (name === "LOOPGUARD_DATA_DIR") continue;
      if (!name.endsWith("_FILE")) {
        env[name] = value;
        continue;
      }
      env[name] = `${SECRETS_TARGET}/${name}`;
      mounts.push(...secretMount(this.files.stateDir, name, value, env[name]));
    }
    Object.assign(env, this.options.envFor?.(spec));
    if (spec.kind === "orchestrator") {
      for (const tool of this.options.services.filter((s) => s.kind === "tool")) {
        env[`${tool.envPrefix}_ADDR`] = `dns:///${dnsName(tool.name)}:${tool.port}`;
      }
    }
    if (state.stores[spec.name] === "postgres") env[`${spec.envPrefix}_STORE`] = postgresUrl(spec.name);
    // The migration step ran before the pod (migrate): serving checks the schema, never migrates.
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
      `io.loopguard.pod=${pod.name}`,
      ...this.#sandbox(),
      "--mount",
      `type=volume,src=${pod.volume},dst=/data,volume-label=${this.label}`,
      ...mounts,
      "--restart",
      "on-failure",
      "--stop-timeout",
      String(STOP_TIMEOUT_S),
      ...envArguments(env),
      `${imageRepository(spec.name)}:${pod.tag}`,
    ];
  }
}

async function containerStatus(container: string): Promise<string> {
  return docker(["container", "inspect", "--format", "{{.State.Status}}", container]).then(
    (s) => s.trim(),
    () => "missing",
  );
}

function envArguments(env: Readonly<Record<string, string>>): string[] {
  return Object.entries(env).flatMap(([key, value]) => ["--env", `${key}=${value}`]);
}
