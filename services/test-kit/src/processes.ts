// Services as real child processes (`node <entry>`, a service's dist/main.js), and what starting
// them needs: free ports, temp folders, the repository's root.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The repository's root folder (this file is services/test-kit/{src,dist}/processes.*). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export interface ServiceProcess {
  readonly child: ChildProcess;
  /** host:port the process serves gRPC on, read from its "serving" log line. */
  readonly address: string;
  readonly metricsPort: number;
  /** Every JSON log line the process wrote to stdout, parsed. */
  readonly lines: Record<string, unknown>[];
  /** Resolves with the exit code (or signal name) once the process has ended. */
  readonly exited: Promise<number | string>;
}

/**
 * Starts `node <entry>` with `env` over this process's environment and waits for its "serving"
 * line (its stdin a pipe from this process with `stdin: "pipe"`, as `pnpm start`'s supervisor gives it).
 * Pass port 0 variables in `env` to let the OS choose ports. The default wait is a hang guard,
 * not a speed check: a start takes 1–2 s, but two test workers and the image builds can starve it.
 */
export function spawnService(
  entry: string,
  env: Record<string, string>,
  timeoutMs = 30_000,
  stdin: "ignore" | "pipe" = "ignore",
): Promise<ServiceProcess> {
  const child = spawn(process.execPath, [entry], {
    env: { ...process.env, ...env },
    stdio: [stdin, "pipe", "pipe"],
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | string>((resolveExit) =>
    child.once("exit", (code, signal) => resolveExit(code ?? signal ?? -1)),
  );
  return new Promise((resolveServing, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${entry} did not report serving within ${timeoutMs} ms; stderr: ${stderr}`));
    }, timeoutMs);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${entry} exited (${code}) before serving; stderr: ${stderr}`));
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      lines.push(record);
      if (record.msg === "serving") {
        clearTimeout(timer);
        const address = String(record.address);
        resolveServing({ child, address, metricsPort: Number(record.metrics_port), lines, exited });
      }
    });
  });
}

/** Sends `signal` (SIGKILL by default) unless the process has ended, and waits until it is gone. */
export async function kill(proc: ServiceProcess, signal: NodeJS.Signals = "SIGKILL"): Promise<number | string> {
  if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill(signal);
  return proc.exited;
}

/** Where the kernel's range for outgoing connections' local ports and listen(0) starts (Linux's default if unread). */
function ephemeralLow(): number {
  try {
    const low = Number.parseInt(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8"), 10);
    if (low > 0) return low;
  } catch {
    // Not Linux: its default.
  }
  return 32768;
}

/** Ports this process handed out, never handed out twice. */
const handedOut = new Set<number>();

/**
 * A port free a moment ago for a process to bind later (a restarted process comes back on the
 * same one). Written by hand: get-port and listen(0) take it from the kernel's ephemeral range,
 * where any outgoing connection made meanwhile (a test's client, a health check) may take it as
 * its local port; this one picks at random below that range, where only another picker could.
 */
export async function freePort(): Promise<number> {
  const low = 20000;
  const high = Math.max(low + 1000, ephemeralLow()) - 1;
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port found between ${low} and ${high}`);
}

function canListen(port: number): Promise<boolean> {
  return new Promise((answer) => {
    const server = createServer();
    server.once("error", () => answer(false));
    server.listen(port, "127.0.0.1", () => server.close(() => answer(true)));
  });
}

export interface TempDir {
  readonly dir: string;
  remove(): void;
}

/** A fresh folder under the OS's temp folder, named loopguard-<prefix>-…. */
export function tempDir(prefix: string): TempDir {
  const dir = mkdtempSync(join(tmpdir(), `loopguard-${prefix}-`));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The environment as a shell would give a child: without the npm settings `pnpm test` passes its scripts. */
export function shellEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^npm_config_/i.test(name)));
}

/** Runs `signal` (a kill, a priority change) on a process, unless the process has ended meanwhile (ESRCH). */
export function unlessEnded(signal: () => unknown): void {
  try {
    signal();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
  }
}
