// What a process holds and spends, read from outside it: resident memory, descriptors and CPU from
// /proc (reading them costs the process nothing), heap and handles from its /metrics (read between
// measured windows only, since a scrape makes it work), after a full garbage collection asked for
// through its inspector, so that the heap counts what is live rather than what a burst left behind.
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { ServiceProcess } from "@loopguard/test-kit";
import { metricValue } from "@loopguard/tool-sdk/testing";

/** Linux counts a process's CPU time in ticks of 1/100 s (USER_HZ). */
const TICKS_PER_SECOND = 100;

export interface Holding {
  readonly rssBytes: number;
  readonly heapUsedBytes: number;
  readonly activeHandles: number;
  readonly activeResources: number;
  readonly openFds: number;
}

function rssBytes(pid: number): number {
  const line = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(line?.[1]) * 1024;
}

/** User + system CPU seconds of `pid` (fields 14 and 15 of /proc/<pid>/stat, after the command name). */
export function cpuSecondsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}

export async function metricsPage(proc: ServiceProcess): Promise<string> {
  return (await fetch(`http://127.0.0.1:${proc.metricsPort}/metrics`)).text();
}

/**
 * A full garbage collection in the process listening for an inspector on `inspectPort`. Node 20 has
 * a WebSocket client only behind a flag, so a short-lived helper process speaks the protocol.
 */
async function collectGarbage(inspectPort: number): Promise<void> {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json()) as {
    webSocketDebuggerUrl: string;
  }[];
  const script = `const ws = new WebSocket(process.argv[1]);
ws.onopen = () => ws.send(JSON.stringify({ id: 1, method: "HeapProfiler.collectGarbage" }));
ws.onmessage = (m) => { if (JSON.parse(m.data).id === 1) process.exit(0); };
ws.onerror = () => process.exit(1);`;
  await new Promise<void>((resolve, reject) =>
    execFile(
      process.execPath,
      ["--experimental-websocket", "--no-warnings", "-e", script, targets[0]!.webSocketDebuggerUrl],
      { timeout: 30_000 },
      (error) => (error ? reject(error) : resolve()),
    ),
  );
}

/** What `proc` holds after a full collection (it was started with --inspect=127.0.0.1:<inspectPort>). */
export async function holding(proc: ServiceProcess, inspectPort: number): Promise<Holding> {
  await collectGarbage(inspectPort);
  const page = await metricsPage(proc);
  const pid = proc.child.pid!;
  return {
    rssBytes: rssBytes(pid),
    heapUsedBytes: metricValue(page, "nodejs_heap_size_used_bytes"),
    activeHandles: metricValue(page, "nodejs_active_handles_total"),
    activeResources: metricValue(page, "nodejs_active_resources_total"),
    openFds: readdirSync(`/proc/${pid}/fd`).length,
  };
}

/** Milliseconds of CPU per second `proc` spends over `ms` in which nobody asks it anything. */
export async function idleCpu(proc: ServiceProcess, ms: number): Promise<number> {
  const pid = proc.child.pid!;
  const before = cpuSecondsOf(pid);
  const started = performance.now();
  await sleep(ms);
  return ((cpuSecondsOf(pid) - before) * 1000) / ((performance.now() - started) / 1000);
}

/** Polls `check` every 500 ms until it returns true or `timeoutMs` passes; returns whether it did. */
export async function until(check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await sleep(500);
  }
  return false;
}

/** Waits until `read` has not changed for `quietMs` (or `timeoutMs` passed); returns the milliseconds waited. */
export async function quiet(read: () => number, quietMs: number, timeoutMs: number): Promise<number> {
  const started = performance.now();
  let last = read();
  let since = started;
  while (performance.now() - since < quietMs && performance.now() - started < timeoutMs) {
    await sleep(250);
    const now = read();
    if (now !== last) [last, since] = [now, performance.now()];
  }
  return since - started;
}

export function percentile(values: readonly number[], p: number): number {
  const sorted = Float64Array.from(values).sort();
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

export function holdingRow(label: string, h: Holding): string {
  return `  ${label.padEnd(44)} RSS ${mb(h.rssBytes).padStart(9)}  heap used ${mb(h.heapUsedBytes).padStart(9)}  handles ${String(h.activeHandles).padStart(6)}  resources ${String(h.activeResources).padStart(6)}  fds ${String(h.openFds).padStart(6)}`;
}
