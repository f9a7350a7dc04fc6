// The local supervisor with real service processes: a crashed service is restarted with
// backoff; one that cannot start fails the start instead of looping.
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { discoverServices } from "@loopguard/tool-sdk";
import { checkHealth } from "@loopguard/tool-sdk/testing";
import { freePort } from "@loopguard/test-kit";
import { afterEach, describe, expect, it } from "vitest";
import { suiteEnvironment } from "../src/suite-env.js";
import { cleanups, fixture, fixtureEnvironment, risk, runCleanups, servicesDir, supervise } from "./harness.js";

afterEach(runCleanups);

describe("Supervisor", () => {
  it("discovers every service with a loopguard manifest, the orchestrator included, and no library", () => {
    const names = discoverServices(servicesDir).map((s) => s.name);
    expect(names).toEqual(expect.arrayContaining(["billing", "kb-search", "orchestrator", "risk"]));
    expect(names).not.toContain("tool-sdk");
    expect(names).not.toContain("sql-store");
  });

  it("makes each secret file a service declares once, 0600 in 0700 folders, and names it to that service alone", () => {
    const dataDir = join(mkdtempSync(join(tmpdir(), "loopguard-supervisor-")), "data");
    cleanups.push(() => rmSync(dirname(dataDir), { recursive: true, force: true }));
    const specs = discoverServices(servicesDir);
    const envOf = (name: string) => suiteEnvironment(dataDir, specs).envFor!(specs.find((s) => s.name === name)!);
    const pepperFile = join(dataDir, "secrets", "loopguard-risk-pepper", "pepper");
    const callKeys = (tool: string) => join(dataDir, "keys", "call-keys", `${tool}.json`);
    expect(envOf("risk")).toEqual({ RISK_CUSTOMER_KEY_PEPPER_FILE: pepperFile, RISK_CALL_KEYS_FILE: callKeys("risk") });
    const modes = [dataDir, join(dataDir, "secrets"), dirname(pepperFile), pepperFile].map(
      (path) => statSync(path).mode & 0o777,
    );
    expect(modes).toEqual([0o700, 0o700, 0o700, 0o600]);
    const pepper = readFileSync(pepperFile, "utf8");
    expect(pepper).toMatch(/^[0-9a-f]{64}$/);
    envOf("risk");
    expect(readFileSync(pepperFile, "utf8")).toBe(pepper);
    // Each tool holds its own call key (0600), never the call secrets.
    expect(envOf("billing")).toEqual({ BILLING_CALL_KEYS_FILE: callKeys("billing") });
    expect(statSync(callKeys("billing")).mode & 0o777).toBe(0o600);
    expect(readFileSync(callKeys("billing"), "utf8")).not.toBe(readFileSync(callKeys("risk"), "utf8"));
    // The orchestrator's declared signing key is the key pair ensureLocalKeys made, not a random secret.
    expect(Object.keys(envOf("orchestrator"))).toEqual(["LOOPGUARD_SIGNING_KEY_FILE", "LOOPGUARD_CALL_SECRETS_FILE"]);
    expect(existsSync(join(dataDir, "secrets", "loopguard-signing-key"))).toBe(false);
  });

  it("restarts a SIGKILLed service with backoff, on the same port", async () => {
    const spec = await risk();
    const { supervisor, logged } = supervise(fixtureEnvironment);
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
    expect(logged.find((w) => w.msg === "service exited; restarting")).toMatchObject({
      service: "risk",
      signal: "SIGKILL",
      restart_in_ms: 100,
    });
  });

  it("fails the start with one line naming the port and its variable when a service cannot bind it", async () => {
    const spec = await risk();
    const { supervisor } = supervise(fixtureEnvironment);
    // Not a server the probe asks: risk binds its gRPC port, then fails on its HTTP one.
    const blocker: Server = await new Promise((ok) => {
      const s = createServer((socket) => socket.destroy()).listen(spec.metricsPort, "127.0.0.1", () => ok(s));
    });
    cleanups.push(() => new Promise<void>((ok) => blocker.close(() => ok())));
    await expect(supervisor.start([spec])).rejects.toThrow(
      `port ${spec.metricsPort} (risk HTTP, RISK_METRICS_PORT) is in use on 127.0.0.1: another suite (another data folder?) or program holds it; stop it first`,
    );
  });

  it("is not ready on another process's SERVING answer: a port another suite's service holds fails the start", async () => {
    const spec = await risk();
    await supervise(fixtureEnvironment).supervisor.start([spec]);
    const { supervisor, logged } = supervise(fixtureEnvironment);
    await expect(supervisor.start([spec])).rejects.toThrow(
      `port ${spec.port} (risk gRPC, RISK_PORT) is in use on 127.0.0.1: another suite (another data folder?) or program holds it; stop it first`,
    );
    expect(logged.filter((w) => w.msg === "service exited; restarting")).toEqual([]);
  });

  it('is ready only when the service answers grpc.health.v1 SERVING, not when it logs "serving"', async () => {
    const spec = {
      ...(await risk()),
      name: "log-only",
      entry: fixture("log-only.mjs"),
    };
    const { supervisor } = supervise(undefined, { readyTimeoutMs: 1500 });
    await expect(supervisor.start([spec])).rejects.toThrow(
      `log-only was not SERVING on 127.0.0.1:${spec.port} within 1500 ms`,
    );
  });

  it("kills a service that ignores SIGTERM once the grace period is over", async () => {
    const spec = await risk();
    const { supervisor, logged } = supervise(fixtureEnvironment, { stopGraceMs: 500 });
    await supervisor.start([spec]);
    const pid = supervisor.pids().risk!;
    // A stopped process leaves SIGTERM pending, as a hung one would never act on it.
    process.kill(pid, "SIGSTOP");
    const started = Date.now();
    await supervisor.stop();
    expect(Date.now() - started).toBeGreaterThanOrEqual(500);
    expect(() => process.kill(pid, 0)).toThrow(/ESRCH/);
    expect(logged.find((w) => w.msg === "service ignored SIGTERM; killing it")).toMatchObject({
      service: "risk",
      pid,
      grace_ms: 500,
    });
  });

  it("stops a service that drains on SIGTERM without killing it", async () => {
    const spec = await risk();
    const { supervisor, logged } = supervise(fixtureEnvironment, { stopGraceMs: 10_000 });
    await supervisor.start([spec]);
    await supervisor.stop();
    expect(logged.find((w) => w.msg === "service ignored SIGTERM; killing it")).toBeUndefined();
  });

  it("gives the orchestrator its private key and no tool any: not in its environment, not in a file its configuration names", async () => {
    const specs = await Promise.all(
      discoverServices(servicesDir).map(async (s) => ({ ...s, port: await freePort(), metricsPort: await freePort() })),
    );
    const { supervisor } = supervise(fixtureEnvironment);
    await supervisor.start(specs);
    const privateMaterial = /"d"\s*:/;
    for (const spec of specs) {
      const pid = supervisor.pids()[spec.name]!;
      const environ = Object.fromEntries(
        readFileSync(`/proc/${pid}/environ`, "utf8")
          .split("\0")
          .filter(Boolean)
          .map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]),
      );
      const namedFiles = Object.entries(environ)
        .filter(([k, v]) => k.endsWith("_FILE") && existsSync(v))
        .map(([, v]) => v);
      const holdsKey = [...Object.values(environ), ...namedFiles.map((f) => readFileSync(f, "utf8"))].some((text) =>
        privateMaterial.test(text),
      );
      expect(environ.LOOPGUARD_JWKS_FILE, spec.name).toBeDefined();
      if (spec.kind === "orchestrator") {
        expect(holdsKey, "the orchestrator signs tool tokens").toBe(true);
      } else {
        expect(environ.LOOPGUARD_SIGNING_KEY_FILE, spec.name).toBeUndefined();
        expect(holdsKey, `${spec.name} must hold no private key`).toBe(false);
      }
    }
  });
});
