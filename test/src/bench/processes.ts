// The services as real processes for the end-to-end benchmarks: where their builds are, when the
// orchestrator says a session ended (its info log line), and what CPU a process has spent (its /metrics).
import { rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { ServiceProcess } from "@loopguard/test-kit";
import { metricValue } from "@loopguard/tool-sdk/testing";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The built entry of a service, e.g. services/kb-search/dist/main.js. */
export const entryOf = (service: string): string => join(root, "services", service, "dist", "main.js");

export interface SessionEnd {
  readonly state: string;
  /** Decisions the policy made (the log line's `count`). */
  readonly decisions: number;
}

/** Resolves, per session id, when an orchestrator (any of several replicas) logs that the session ended. */
export function sessionEnds(...procs: ServiceProcess[]): (sessionId: string) => Promise<SessionEnd> {
  const waiting = new Map<string, (end: SessionEnd) => void>();
  const ended = new Map<string, SessionEnd>();
  const onLine = (line: string) => {
    if (!line.includes('"session ended"')) return;
    const record = JSON.parse(line) as { session_id?: string; state?: string; count?: number };
    const id = String(record.session_id);
    const end = { state: String(record.state), decisions: Number(record.count) };
    const resolveEnd = waiting.get(id);
    if (resolveEnd) {
      waiting.delete(id);
      resolveEnd(end);
    } else ended.set(id, end);
  };
  for (const proc of procs) createInterface({ input: proc.child.stdout! }).on("line", onLine);
  return (sessionId) => {
    const end = ended.get(sessionId);
    if (end !== undefined) {
      ended.delete(sessionId);
      return Promise.resolve(end);
    }
    return new Promise((resolveEnd) => waiting.set(sessionId, resolveEnd));
  };
}

export async function cpuSeconds(proc: ServiceProcess): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${proc.metricsPort}/metrics`)).text();
  return metricValue(page, "process_cpu_seconds_total");
}

/** Ends the processes a benchmark started and removes its data folder. */
export async function stopAll(procs: readonly ServiceProcess[], dataDir: string): Promise<void> {
  for (const p of procs) p.child.kill("SIGKILL");
  await Promise.all(procs.map((p) => p.exited));
  rmSync(dataDir, { recursive: true, force: true });
}
