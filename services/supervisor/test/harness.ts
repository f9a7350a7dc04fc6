// What the supervisor's tests share: risk as the service under supervision, a
// supervisor whose log lines the test reads, and cleanups run after each test.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { freePort } from "@loopguard/test-kit";
import { createLogger, discoverServices, type ServiceSpec } from "@loopguard/tool-sdk";
import { TEST_AUTH_ENV } from "@loopguard/tool-sdk/testing";
import { suiteEnvironment } from "../src/suite-env.js";
import { Supervisor, type SupervisorOptions } from "../src/supervisor.js";

export const servicesDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const fixture = (name: string) => join(dirname(fileURLToPath(import.meta.url)), "fixtures", name);

/** Run by each test file's afterEach, last pushed first. */
export const cleanups: (() => Promise<void> | void)[] = [];
export async function runCleanups(): Promise<void> {
  for (const c of cleanups.splice(0).reverse()) await c();
}

export async function risk(): Promise<ServiceSpec> {
  const spec = discoverServices(servicesDir).find((s) => s.name === "risk")!;
  return { ...spec, port: await freePort(), metricsPort: await freePort() };
}

export type Environment = (dataDir: string) => ReturnType<typeof suiteEnvironment>;

/** The suite's environment for the fixture services: no addresses of the suite's own to give. */
export const fixtureEnvironment: Environment = (dataDir) => suiteEnvironment(dataDir, []);

export type TestOptions = Partial<Omit<SupervisorOptions, "env" | "envFor" | "log" | "output">>;

/** A supervisor with a fresh data folder; `logged` holds every line it logs, parsed. */
export function supervise(
  environment?: Environment,
  options: TestOptions = {},
): { supervisor: Supervisor; logged: Record<string, unknown>[] } {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-supervisor-"));
  const logged: Record<string, unknown>[] = [];
  const supervisor = new Supervisor({
    ...(environment ? environment(dataDir) : { env: { LOOPGUARD_DATA_DIR: dataDir, ...TEST_AUTH_ENV } }),
    log: createLogger({ service: "supervisor", write: (l) => logged.push(JSON.parse(l) as Record<string, unknown>) }),
    output: () => undefined,
    initialBackoffMs: 100,
    ...options,
  });
  cleanups.push(async () => {
    try {
      await supervisor.stop();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
  return { supervisor, logged };
}

/** The first truthy value `probe` gives, asked every 50 ms; fails after `withinMs`. */
export async function eventually<T>(probe: () => T | undefined, withinMs: number, what: string): Promise<T> {
  const until = Date.now() + withinMs;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > until) throw new Error(`not within ${withinMs} ms: ${what}`);
    await sleep(50);
  }
}
