// One suite per data folder, on free ports: `pnpm start` refuses, with one line and nothing made,
// while another suite's supervisor holds the folder or another program a service's port; a lock
// left by a supervisor that is gone is taken over.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { utimes } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { discoverServices } from "@loopguard/tool-sdk";
import { afterEach, expect, it } from "vitest";
import { requireFreePorts } from "../src/ports.js";
import { lockDataDir } from "../src/suite-lock.js";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const servicesDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const clean of cleanups.splice(0).reverse()) clean();
});

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "loopguard-suite-lock-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

it("refuses a second start on a folder whose supervisor is alive, before it makes a key or starts a service", () => {
  const dir = dataDir();
  // A process that looks like a supervisor holds the folder.
  const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 30_000)", "supervisor"], { stdio: "ignore" });
  cleanups.push(() => holder.kill("SIGKILL"));
  writeFileSync(join(dir, "supervisor.pid"), `${holder.pid}\n`);
  const run = spawnSync(process.execPath, [MAIN], {
    env: { ...process.env, LOOPGUARD_DATA_DIR: dir, LOOPGUARD_DEMO: "0" },
    encoding: "utf8",
    timeout: 15_000,
  });
  expect(run.status).toBe(1);
  expect(run.stderr).toBe(
    `loopguard: a suite is already running on ${dir} (supervisor pid ${holder.pid}): stop it (Ctrl-C where it runs, or kill ${holder.pid}) or give this one another LOOPGUARD_DATA_DIR\n`,
  );
  expect(existsSync(join(dir, "keys"))).toBe(false);
  expect(readFileSync(join(dir, "supervisor.pid"), "utf8")).toBe(`${holder.pid}\n`);
});

it("refuses a suite at once while another suite's supervisor holds one of its ports, before it makes a key", () => {
  const dir = dataDir();
  // The machine-wide port locks live in the temporary folder: this test's own.
  const locks = dataDir();
  const holder = spawn(process.execPath, ["-e", "setTimeout(() => {}, 30_000)", "supervisor"], { stdio: "ignore" });
  cleanups.push(() => holder.kill("SIGKILL"));
  const orchestrator = discoverServices(servicesDir).find((s) => s.kind === "orchestrator")!;
  const held = `loopguard-port-${orchestrator.port}.pid`;
  writeFileSync(join(locks, held), `${holder.pid}\n`);
  const run = spawnSync(process.execPath, [MAIN], {
    env: { ...process.env, LOOPGUARD_DATA_DIR: dir, LOOPGUARD_DEMO: "0", TMPDIR: locks },
    encoding: "utf8",
    timeout: 15_000,
  });
  expect(run.stderr).toBe(
    `loopguard: port ${orchestrator.port} (orchestrator gRPC, ORCHESTRATOR_PORT) is held by another suite (supervisor pid ${holder.pid}): stop it (Ctrl-C where it runs, or kill ${holder.pid}) first\n`,
  );
  expect(run.status).toBe(1);
  expect(existsSync(join(dir, "keys"))).toBe(false);
  // It let go of the folder and of the ports it had taken before the one held.
  expect(existsSync(join(dir, "supervisor.pid"))).toBe(false);
  expect(readdirSync(locks)).toEqual([held]);
});

it("refuses to start on a damaged key file with one line naming it, and lets go of the folder", () => {
  const dir = dataDir();
  const start = () =>
    spawnSync(process.execPath, [MAIN], {
      env: { ...process.env, LOOPGUARD_DATA_DIR: dir, LOOPGUARD_DEMO: "0" },
      encoding: "utf8",
      timeout: 15_000,
    });
  mkdirSync(join(dir, "keys"), { recursive: true });
  const damaged = join(dir, "keys", "requester.jwk");
  writeFileSync(damaged, '{"kty":');
  const run = start();
  expect(run.status).toBe(1);
  expect(run.stderr).toBe(
    `loopguard: ${damaged} is not a key file that can be read (not JSON); move it away and start again to have a new one made\n`,
  );
  expect(existsSync(join(dir, "supervisor.pid"))).toBe(false);
});

it("takes over the lock of a supervisor that is gone, and lets go of its own only", () => {
  const dir = dataDir();
  const gone = spawnSync(process.execPath, ["-e", "process.pid"]).pid!;
  writeFileSync(join(dir, "supervisor.pid"), `${gone}\n`);
  const unlock = lockDataDir(dir);
  expect(readFileSync(join(dir, "supervisor.pid"), "utf8")).toBe(`${process.pid}\n`);
  unlock();
  expect(existsSync(join(dir, "supervisor.pid"))).toBe(false);
});

it("lets one of many starts take over a stale lock at the same moment, the others refused", async () => {
  const gone = spawnSync(process.execPath, ["-e", "process.pid"]).pid!;
  const dirs = Array.from({ length: 12 }, () => {
    const dir = dataDir();
    writeFileSync(join(dir, "supervisor.pid"), `${gone}\n`);
    return dir;
  });
  const contender = fileURLToPath(new URL("fixtures/take-lock.mjs", import.meta.url));
  const at = String(Date.now() + 2_000);
  const contend = (dir: string) =>
    new Promise<string>((done) => {
      const child = spawn(process.execPath, [contender, dir, at]);
      let said = "";
      child.stdout.on("data", (chunk) => {
        said += chunk;
      });
      child.once("exit", () => done(said));
    });
  const outcomes = await Promise.all(dirs.map((dir) => Promise.all([contend(dir), contend(dir), contend(dir)])));
  expect(outcomes.map((said) => said.filter((s) => s === "took").length)).toEqual(dirs.map(() => 1));
  expect(outcomes.flat().filter((s) => s !== "took")).toEqual(
    Array.from({ length: dirs.length * 2 }, () => "SuiteLockError"),
  );
});

it("holds an empty lock a start is writing at this moment, and takes over one left empty long ago", async () => {
  const dir = dataDir();
  const file = join(dir, "supervisor.pid");
  writeFileSync(file, "");
  expect(() => lockDataDir(dir)).toThrow(
    `another start is taking ${dir} at this moment: try again, or give this one another LOOPGUARD_DATA_DIR`,
  );
  const longAgo = new Date(Date.now() - 60_000);
  await utimes(file, longAgo, longAgo);
  const unlock = lockDataDir(dir);
  expect(readFileSync(file, "utf8")).toBe(`${process.pid}\n`);
  unlock();
});

it("refuses to start while another program holds a service's port, naming it", async () => {
  const taken = createServer();
  await new Promise<void>((ok) => taken.listen(0, "127.0.0.1", ok));
  cleanups.push(() => taken.close());
  const port = (taken.address() as { port: number }).port;
  const risk = discoverServices(servicesDir).find((s) => s.name === "risk")!;
  await expect(requireFreePorts([{ ...risk, port }])).rejects.toThrow(
    `port ${port} (risk gRPC, RISK_PORT) is in use on 127.0.0.1: another suite (another data folder?) or program holds it; stop it first`,
  );
});
