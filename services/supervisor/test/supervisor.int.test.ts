// The local supervisor with real service processes: a crashed service is restarted with
// backoff; one that cannot start fails the start instead of looping.
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { createLogger } from "@loopguard/tool-sdk";
import { checkHealth, TEST_AUTH_SECRET } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";
import { withLocalSecrets } from "../src/local-secrets.js";
import { discoverServices, type ServiceSpec } from "../src/services.js";
import { Supervisor } from "../src/supervisor.js";

const servicesDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

function freePort(): Promise<number> {
  return new Promise((ok) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => ok(port));
    });
  });
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function risk(): Promise<ServiceSpec> {
  const spec = discoverServices(servicesDir).find((s) => s.name === "risk")!;
  return { ...spec, port: await freePort(), metricsPort: await freePort() };
}

function supervise(): { supervisor: Supervisor; warnings: Record<string, unknown>[]; dataDir: string } {
  const dataDir = mkdtempSync(join(tmpdir(), "loopguard-supervisor-"));
  const warnings: Record<string, unknown>[] = [];
  const supervisor = new Supervisor({
    env: { LOOPGUARD_DATA_DIR: dataDir, LOOPGUARD_AUTH_SECRET: TEST_AUTH_SECRET },
    log: createLogger({ service: "supervisor", write: (l) => warnings.push(JSON.parse(l) as Record<string, unknown>) }),
    output: () => undefined,
    initialBackoffMs: 100,
  });
  cleanups.push(async () => {
    await supervisor.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return { supervisor, warnings, dataDir };
}

describe("Supervisor", () => {
  it("discovers every service with a loopguard manifest, the orchestrator included, and no library", () => {
    const names = discoverServices(servicesDir).map((s) => s.name);
    expect(names).toEqual(expect.arrayContaining(["billing", "kb-search", "orchestrator", "risk"]));
    expect(names).not.toContain("tool-sdk");
    expect(names).not.toContain("sql-store");
  });

  it("makes the secrets a service declares once, 0600 in a 0700 data folder, and names them to that service alone", () => {
    const dataDir = join(mkdtempSync(join(tmpdir(), "loopguard-supervisor-")), "data");
    cleanups.push(() => rmSync(dirname(dataDir), { recursive: true, force: true }));
    const specs = discoverServices(servicesDir);
    const risk = withLocalSecrets(specs.find((s) => s.name === "risk")!, dataDir);
    const pepperFile = join(dataDir, "risk-customer-key-pepper");
    expect(risk.env).toEqual({ RISK_CUSTOMER_KEY_PEPPER_FILE: pepperFile });
    expect([statSync(dataDir).mode & 0o777, statSync(pepperFile).mode & 0o777]).toEqual([0o700, 0o600]);
    const pepper = readFileSync(pepperFile, "utf8");
    expect(pepper).toMatch(/^[0-9a-f]{64}$/);
    withLocalSecrets(specs.find((s) => s.name === "risk")!, dataDir);
    expect(readFileSync(pepperFile, "utf8")).toBe(pepper);
    expect(withLocalSecrets(specs.find((s) => s.name === "billing")!, dataDir).env).toEqual({});
  });

  it("restarts a SIGKILLed service with backoff, on the same port", async () => {
    const { supervisor, warnings, dataDir } = supervise();
    const spec = withLocalSecrets(await risk(), dataDir);
    await supervisor.start([spec]);
    const address = `127.0.0.1:${spec.port}`;
    expect(await checkHealth(address)).toBe("SERVING");
    const first = supervisor.pids().risk!;
    process.kill(first, "SIGKILL");
    let status = "";
    const until = Date.now() + 15_000;
    while (status !== "SERVING" && Date.now() < until) {
      await sleep(100);
      status = await checkHealth(address, "", 500).catch(() => "down");
    }
    expect(status).toBe("SERVING");
    expect(supervisor.pids().risk).not.toBe(first);
    expect(warnings.find((w) => w.msg === "service exited; restarting")).toMatchObject({ service: "risk", signal: "SIGKILL", restart_in_ms: 100 });
  });

  it("fails the start, naming the service, when it exits before serving (port taken)", async () => {
    const { supervisor, dataDir } = supervise();
    const spec = withLocalSecrets(await risk(), dataDir);
    const blocker: Server = await new Promise((ok) => {
      const s = createServer().listen(spec.port, "127.0.0.1", () => ok(s));
    });
    cleanups.push(() => new Promise<void>((ok) => blocker.close(() => ok())));
    await expect(supervisor.start([spec])).rejects.toThrow(/risk exited .* before serving/);
  });
});
