// Runs each service as its own child process, like pods: a process that exits unexpectedly is
// restarted with exponential backoff (capped), and the backoff resets once it has stayed up.
// SIGTERM/SIGINT to the supervisor is passed to every child, which drain and exit.
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { Logger } from "@loopguard/tool-sdk";
import type { ServiceSpec } from "./services.js";

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
}

interface Running {
  readonly spec: ServiceSpec;
  served: boolean;
  lastLine: string;
  child: ChildProcess | undefined;
  restarts: number;
  backoffMs: number;
  startedAt: number;
  timer: NodeJS.Timeout | undefined;
}

export class Supervisor {
  readonly #running = new Map<string, Running>();
  #stopping = false;
  readonly #ready = new Map<string, { resolve: () => void; reject: (error: Error) => void }>();

  constructor(private readonly options: SupervisorOptions) {}

  /**
   * Starts every service; resolves once each has reported that it is serving. A service that
   * exits before it ever served (a port in use, bad config) fails the start instead of being
   * restarted forever.
   */
  async start(specs: readonly ServiceSpec[]): Promise<void> {
    const ready = specs.map((spec) => new Promise<void>((resolve, reject) => this.#ready.set(spec.name, { resolve, reject })));
    for (const spec of specs) {
      const entry: Running = { spec, served: false, lastLine: "", child: undefined, restarts: 0, backoffMs: this.options.initialBackoffMs ?? 250, startedAt: 0, timer: undefined };
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
        [`${spec.envPrefix}_PORT`]: String(spec.port),
        [spec.metricsPortEnv]: String(spec.metricsPort),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    entry.child = child;
    entry.startedAt = Date.now();
    const forward = (line: string) => {
      this.options.output(spec.name, line);
      entry.lastLine = line;
      if (!entry.served && line.includes('"msg":"serving"')) {
        entry.served = true;
        this.#ready.get(spec.name)?.resolve();
      }
    };
    createInterface({ input: child.stdout! }).on("line", forward);
    createInterface({ input: child.stderr! }).on("line", forward);
    child.once("exit", (code, signal) => {
      entry.child = undefined;
      if (this.#stopping) return;
      if (!entry.served) {
        this.#ready.get(spec.name)?.reject(new Error(`${spec.name} exited (${code ?? signal}) before serving: ${entry.lastLine.slice(0, 300)}`));
        return;
      }
      if (Date.now() - entry.startedAt > (this.options.stableAfterMs ?? 10_000)) {
        entry.backoffMs = this.options.initialBackoffMs ?? 250;
      }
      const delay = entry.backoffMs;
      entry.backoffMs = Math.min(entry.backoffMs * 2, this.options.maxBackoffMs ?? 10_000);
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

  /** Sends SIGTERM to every child and waits until all have exited. */
  async stop(): Promise<void> {
    this.#stopping = true;
    const exits: Promise<void>[] = [];
    for (const entry of this.#running.values()) {
      clearTimeout(entry.timer);
      const child = entry.child;
      if (!child || child.exitCode !== null) continue;
      exits.push(new Promise((resolve) => child.once("exit", () => resolve())));
      child.kill("SIGTERM");
    }
    await Promise.all(exits);
  }
}
