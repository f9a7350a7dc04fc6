// Runs each service as its own child process, like pods: a process is ready when it has announced
// "serving" on its ports over its own stdout and then answers grpc.health.v1 Check with SERVING (as
// a kubelet's grpc probe asks; the announcement proves the answer is this child's, not another
// suite's on the same port), at the first start and after every restart. Once ready, a liveness
// probe checks it periodically, and one that stops answering (frozen, blocked, deadlocked) is
// killed, as is a restarted process not ready in time. A process that exits is restarted with
// exponential backoff (capped), and the backoff resets once it has served for a while. SIGTERM/SIGINT
// to the supervisor is passed to every child, which drain and exit; a child still running after the
// grace period is killed (SIGKILL), as a kubelet does.
import { type ChildProcess, spawn } from "node:child_process";
import { on } from "node:events";
import { createInterface, type Interface } from "node:readline";
import { backoffDelayMs, type Logger, SUPERVISED_ENV, type ServiceSpec, waitUntilServing } from "@loopguard/tool-sdk";
import { LIVENESS_DEFAULTS, type LivenessProbe, watchLiveness } from "./liveness.js";
import { portInUse, portTaken, servicePorts } from "./ports.js";

export interface SupervisorOptions {
  readonly env: Readonly<Record<string, string>>;
  /** Variables for one service only (e.g. the orchestrator's private key), beside `env`. */
  readonly envFor?: (spec: ServiceSpec) => Readonly<Record<string, string>>;
  readonly log: Logger;
  /** Where each child's log lines go (they are JSON already). */
  readonly output: (service: string, line: string) => void;
  readonly initialBackoffMs?: number;
  readonly maxBackoffMs?: number;
  /** A process serving this long is considered healthy again and its backoff resets. */
  readonly stableAfterMs?: number;
  /**
   * How long a process may take to answer SERVING: a first start not ready in time fails the start,
   * a restarted process is killed and restarted with backoff.
   */
  readonly readyTimeoutMs?: number;
  /**
   * The liveness probe of a process that has served (LIVENESS_DEFAULTS, the clusters' own, when
   * unset); a failureThreshold of 0 runs none.
   */
  readonly liveness?: LivenessProbe;
  /** How long a child has after SIGTERM before SIGKILL; above the services' own 10 s shutdown grace. */
  readonly stopGraceMs?: number;
}

interface Running {
  readonly spec: ServiceSpec;
  /** Has served once: its start has resolved, and an exit from now on is restarted. */
  served: boolean;
  lastLine: string;
  child: ChildProcess | undefined;
  /** Ends the probes (readiness, then liveness) of the current process. */
  probe: AbortController | undefined;
  restarts: number;
  /** Exits since the service last ran stably: the restart backoff's attempt number. */
  quickExits: number;
  startedAt: number;
  /** When the current process became ready; undefined until it does. */
  servingSince: number | undefined;
  timer: NodeJS.Timeout | undefined;
}

export class Supervisor {
  readonly #running = new Map<string, Running>();
  #stopping = false;
  readonly #ready = new Map<string, { resolve: () => void; reject: (error: Error) => void }>();

  readonly #liveness: LivenessProbe;

  constructor(private readonly options: SupervisorOptions) {
    this.#liveness = options.liveness ?? LIVENESS_DEFAULTS;
  }

  /**
   * Starts every service; resolves once each has announced "serving" and answers grpc.health.v1
   * Check with SERVING. A service that exits before it ever served (a port in use: a SuiteLockError
   * naming it; bad config), or is not SERVING within `readyTimeoutMs`, fails the start instead of
   * being restarted forever.
   */
  async start(specs: readonly ServiceSpec[]): Promise<void> {
    const ready = specs.map(
      (spec) => new Promise<void>((resolve, reject) => this.#ready.set(spec.name, { resolve, reject })),
    );
    for (const spec of specs) {
      const entry: Running = {
        spec,
        served: false,
        lastLine: "",
        child: undefined,
        probe: undefined,
        restarts: 0,
        quickExits: 0,
        startedAt: 0,
        servingSince: undefined,
        timer: undefined,
      };
      this.#running.set(spec.name, entry);
      this.#launch(entry);
    }
    await Promise.all(ready);
  }

  pids(): Record<string, number | undefined> {
    return Object.fromEntries([...this.#running].map(([name, r]) => [name, r.child?.pid]));
  }

  #launch(entry: Running): void {
    const { spec } = entry;
    // A private key reaches a child only through envFor, never inherited from the shell that started the suite.
    const { LOOPGUARD_SIGNING_KEY_FILE: _signingKey, ...inherited } = process.env;
    const child = spawn(process.execPath, [spec.entry], {
      cwd: spec.dir,
      env: {
        ...inherited,
        ...this.options.env,
        ...this.options.envFor?.(spec),
        ...Object.fromEntries(servicePorts(spec).map((p) => [p.variable, String(p.port)])),
        // Its stdin is a pipe from this process: it ends when the supervisor does, however (a SIGKILL
        // too), and the service then stops rather than run on without it.
        [SUPERVISED_ENV]: "1",
      },
      stdio: ["pipe", "pipe", "pipe"],
    });
    entry.child = child;
    entry.startedAt = Date.now();
    entry.servingSince = undefined;
    const probe = new AbortController();
    entry.probe = probe;
    const forward = (line: string) => {
      this.options.output(spec.name, line);
      entry.lastLine = line;
    };
    const stdout = createInterface({ input: child.stdout! }).on("line", forward);
    createInterface({ input: child.stderr! }).on("line", forward);
    void this.#probe(entry, child, stdout, probe.signal);
    child.once("exit", (code, signal) => {
      entry.child = undefined;
      probe.abort();
      if (this.#stopping) return;
      if (!entry.served) {
        const exited = new Error(
          `${spec.name} exited (${code ?? signal}) before serving: ${entry.lastLine.slice(0, 300)}`,
        );
        void portTaken(spec).then((taken) => this.#ready.get(spec.name)?.reject(taken ? portInUse(taken) : exited));
        return;
      }
      // Only serving counts as up: a process killed for never becoming ready keeps backing off.
      if (
        entry.servingSince !== undefined &&
        Date.now() - entry.servingSince > (this.options.stableAfterMs ?? 10_000)
      ) {
        entry.quickExits = 0;
      }
      entry.quickExits += 1;
      const delay = backoffDelayMs(
        { baseMs: this.options.initialBackoffMs ?? 250, maxMs: this.options.maxBackoffMs ?? 10_000, jitter: "none" },
        entry.quickExits,
      );
      entry.restarts += 1;
      this.options.log.warn("service exited; restarting", {
        service: spec.name,
        exit_code: code ?? undefined,
        signal: signal ?? undefined,
        restart_in_ms: delay,
        count: entry.restarts,
      });
      entry.timer = setTimeout(() => this.#launch(entry), delay);
    });
  }

  /**
   * Readiness of each process: announced on its ports, then SERVING on its gRPC port. A first start
   * not ready in time fails the start; a restarted one is killed, and its exit restarts it with
   * backoff. Once ready, liveness.
   */
  async #probe(entry: Running, child: ChildProcess, stdout: Interface, signal: AbortSignal): Promise<void> {
    const { spec } = entry;
    const { log } = this.options;
    const address = `127.0.0.1:${spec.port}`;
    const timeoutMs = this.options.readyTimeoutMs ?? 60_000;
    // Not AbortSignal.any with AbortSignal.timeout: Node 20 may collect that timeout signal before it fires.
    const ready = new AbortController();
    const abortReady = () => ready.abort();
    signal.addEventListener("abort", abortReady, { once: true });
    const timer = setTimeout(abortReady, timeoutMs);
    try {
      await announced(stdout, spec, ready.signal);
      await waitUntilServing(address, ready.signal);
    } catch {
      // Ended by an exit, which says why itself, or by the stop.
      if (signal.aborted) return;
      if (!entry.served) {
        const reason = `${spec.name} was not SERVING on ${address} within ${timeoutMs} ms: ${entry.lastLine.slice(0, 300)}`;
        this.#ready.get(spec.name)?.reject(new Error(reason));
        return;
      }
      log.warn("service not SERVING after its restart; killing it", {
        service: spec.name,
        pid: child.pid,
        count: entry.restarts,
        ready_timeout_ms: timeoutMs,
      });
      child.kill("SIGKILL");
      return;
    } finally {
      clearTimeout(timer);
      signal.removeEventListener("abort", abortReady);
    }
    entry.servingSince = Date.now();
    if (entry.served) {
      log.info("service serving again", {
        service: spec.name,
        pid: child.pid,
        count: entry.restarts,
        duration_ms: entry.servingSince - entry.startedAt,
      });
    } else {
      entry.served = true;
      this.#ready.get(spec.name)?.resolve();
    }
    await this.#live(entry, child, address, signal);
  }

  /** Liveness of a ready process until it exits: a run of failed checks kills it, and its exit restarts it. */
  async #live(entry: Running, child: ChildProcess, address: string, signal: AbortSignal): Promise<void> {
    const { log } = this.options;
    const fields = { service: entry.spec.name, pid: child.pid };
    const { failureThreshold } = this.#liveness;
    if (failureThreshold === 0) return;
    const error = await watchLiveness(address, this.#liveness, signal, {
      failed: (failures, message) =>
        log.warn("service failed a liveness check", {
          ...fields,
          failed_checks: failures,
          failure_threshold: failureThreshold,
          error_message: message,
        }),
      recovered: (failures) =>
        log.info("service answers its liveness checks again", { ...fields, failed_checks: failures }),
    });
    if (error === undefined) return;
    // Not SIGTERM: a frozen or blocked process would not act on it.
    log.warn("service failed its liveness checks; killing it", {
      ...fields,
      failed_checks: failureThreshold,
      error_message: error,
    });
    child.kill("SIGKILL");
  }

  /** Sends SIGTERM to every child, SIGKILL to any still running after `stopGraceMs`, and waits until all have exited. */
  async stop(): Promise<void> {
    this.#stopping = true;
    const graceMs = this.options.stopGraceMs ?? 15_000;
    const exits: Promise<void>[] = [];
    for (const entry of this.#running.values()) {
      clearTimeout(entry.timer);
      entry.probe?.abort();
      const child = entry.child;
      if (!child || child.exitCode !== null || child.signalCode !== null) continue;
      const kill = setTimeout(() => {
        this.options.log.warn("service ignored SIGTERM; killing it", {
          service: entry.spec.name,
          pid: child.pid,
          grace_ms: graceMs,
        });
        child.kill("SIGKILL");
      }, graceMs);
      exits.push(
        new Promise((resolve) =>
          child.once("exit", () => {
            clearTimeout(kill);
            resolve();
          }),
        ),
      );
      child.kill("SIGTERM");
    }
    await Promise.all(exits);
  }
}

/** Resolves on the child's "serving" line naming the spec's ports: both bound by this very process. */
async function announced(stdout: Interface, spec: ServiceSpec, signal: AbortSignal): Promise<void> {
  for await (const [line] of on(stdout, "line", { signal }) as AsyncIterable<[string]>) {
    if (!line.includes('"msg":"serving"')) continue;
    let fields: { address?: unknown; metrics_port?: unknown };
    try {
      fields = JSON.parse(line);
    } catch {
      continue;
    }
    if (String(fields.address).endsWith(`:${spec.port}`) && fields.metrics_port === spec.metricsPort) return;
  }
}
