// Runs each service as its own child process, like pods: a service is ready when it has announced
// "serving" on its ports over its own stdout and then answers grpc.health.v1 Check with SERVING (as
// a kubelet's grpc probe asks; the announcement proves the answer is this child's, not another
// suite's on the same port), a process that exits unexpectedly is restarted with exponential
// backoff (capped), and the backoff resets once it has stayed up. SIGTERM/SIGINT to the supervisor
// is passed to every child, which drain and exit; a child still running after the grace period is
// killed (SIGKILL), as a kubelet does.
import { type ChildProcess, spawn } from "node:child_process";
import { on } from "node:events";
import { createInterface, type Interface } from "node:readline";
import { backoffDelayMs, type Logger, SUPERVISED_ENV, type ServiceSpec, waitUntilServing } from "@loopguard/tool-sdk";
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
  /** A process up this long is considered healthy again and its backoff resets. */
  readonly stableAfterMs?: number;
  /** How long a first start may take to answer SERVING before the start fails. */
  readonly readyTimeoutMs?: number;
  /** How long a child has after SIGTERM before SIGKILL; above the services' own 10 s shutdown grace. */
  readonly stopGraceMs?: number;
}

interface Running {
  readonly spec: ServiceSpec;
  served: boolean;
  lastLine: string;
  child: ChildProcess | undefined;
  /** Ends the readiness probe of the current process. */
  probe: AbortController | undefined;
  restarts: number;
  /** Exits since the service last ran stably: the restart backoff's attempt number. */
  quickExits: number;
  startedAt: number;
  timer: NodeJS.Timeout | undefined;
}

export class Supervisor {
  readonly #running = new Map<string, Running>();
  #stopping = false;
  readonly #ready = new Map<string, { resolve: () => void; reject: (error: Error) => void }>();

  constructor(private readonly options: SupervisorOptions) {}

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
    const forward = (line: string) => {
      this.options.output(spec.name, line);
      entry.lastLine = line;
    };
    const stdout = createInterface({ input: child.stdout! }).on("line", forward);
    createInterface({ input: child.stderr! }).on("line", forward);
    if (!entry.served) this.#probe(entry, stdout);
    child.once("exit", (code, signal) => {
      entry.child = undefined;
      entry.probe?.abort();
      if (this.#stopping) return;
      if (!entry.served) {
        const exited = new Error(
          `${spec.name} exited (${code ?? signal}) before serving: ${entry.lastLine.slice(0, 300)}`,
        );
        void portTaken(spec).then((taken) => this.#ready.get(spec.name)?.reject(taken ? portInUse(taken) : exited));
        return;
      }
      if (Date.now() - entry.startedAt > (this.options.stableAfterMs ?? 10_000)) {
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

  /** Readiness of a first start: announced on its ports, then SERVING on its gRPC port, or the start fails. */
  #probe(entry: Running, stdout: Interface): void {
    const { spec } = entry;
    const probe = new AbortController();
    entry.probe = probe;
    const timeoutMs = this.options.readyTimeoutMs ?? 60_000;
    const timer = setTimeout(
      () =>
        probe.abort(
          new Error(
            `${spec.name} was not SERVING on 127.0.0.1:${spec.port} within ${timeoutMs} ms: ${entry.lastLine.slice(0, 300)}`,
          ),
        ),
      timeoutMs,
    );
    announced(stdout, spec, probe.signal)
      .then(() => waitUntilServing(`127.0.0.1:${spec.port}`, probe.signal))
      .then(
        () => {
          entry.served = true;
          this.#ready.get(spec.name)?.resolve();
        },
        () => {
          // Only the timeout is reported here: an exit has rejected with its own reason already.
          if (!this.#stopping && entry.child) this.#ready.get(spec.name)?.reject(probe.signal.reason as Error);
        },
      )
      .finally(() => clearTimeout(timer));
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
