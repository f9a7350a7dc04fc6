// A data folder the user cannot use: `pnpm start` refuses with one line naming it and why, before
// it starts any service, not with a Node stack trace (nor one after the services were spawned).
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createLogger } from "@loopguard/tool-sdk";
import { afterEach, expect, it, vi } from "vitest";
import { openServiceLogs } from "../src/data-dir.js";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

function tempFolder(): string {
  const folder = mkdtempSync(join(tmpdir(), "loopguard-data-dir-"));
  folders.push(folder);
  return folder;
}

function start(dir: string, as: { uid?: number; gid?: number } = {}, env: Record<string, string> = {}) {
  return spawnSync(process.execPath, [MAIN], {
    // The port locks go to a folder of this test's own, readable by whoever it runs as.
    env: { ...process.env, LOOPGUARD_DATA_DIR: dir, LOOPGUARD_DEMO: "0", TMPDIR: tempFolder(), ...env },
    encoding: "utf8",
    timeout: 15_000,
    ...as,
  });
}

it.each([
  {
    what: "a file where the data folder should be",
    damage: (dir: string) => writeFileSync(dir, ""),
    line: (dir: string) => `loopguard: cannot use data folder ${dir}: file already exists (EEXIST)\n`,
  },
  {
    what: "a folder named supervisor.pid",
    damage: (dir: string) => mkdirSync(join(dir, "supervisor.pid"), { recursive: true }),
    line: (dir: string) =>
      `loopguard: cannot use data folder ${dir}: supervisor.pid: illegal operation on a directory (EISDIR)\n`,
  },
  {
    what: "a service's log file it cannot open",
    damage: (dir: string) => mkdirSync(join(dir, "logs", "risk.log"), { recursive: true }),
    line: (dir: string) =>
      `loopguard: cannot use data folder ${dir}: logs/risk.log: illegal operation on a directory (EISDIR)\n`,
  },
])("refuses $what with one line, before it starts a service", ({ damage, line }) => {
  const dir = join(tempFolder(), "data");
  damage(dir);
  const run = start(dir);
  expect(run.stderr).toBe(line(dir));
  expect(run.status).toBe(1);
  expect(existsSync(join(dir, "keys"))).toBe(false);
});

it("refuses a data folder it may not write to with one line", () => {
  const dir = join(tempFolder(), "data");
  mkdirSync(dir, { mode: 0o700 });
  chmodSync(dirname(dir), 0o755);
  // Root may write anywhere: the start is run as nobody, whom the folder is not open to.
  const root = process.getuid?.() === 0;
  if (!root) chmodSync(dir, 0o500);
  const run = start(dir, root ? { uid: 65534, gid: 65534 } : {});
  expect(run.stderr).toBe(`loopguard: cannot use data folder ${dir}: supervisor.pid: permission denied (EACCES)\n`);
  expect(run.status).toBe(1);
});

it("warns once of a log file that fails later (a full disk) and drops its lines, the suite running on", async () => {
  const logDir = tempFolder();
  symlinkSync("/dev/full", join(logDir, "risk.log"));
  const warnings: Record<string, unknown>[] = [];
  const log = createLogger({ service: "supervisor", write: (l) => warnings.push(JSON.parse(l)) });
  const output = openServiceLogs(logDir, ["risk"], log);
  output("risk", "a line");
  await vi.waitFor(() => expect(warnings).toHaveLength(1));
  output("risk", "a line after");
  await new Promise((settled) => setImmediate(settled));
  expect(warnings).toEqual([
    expect.objectContaining({
      msg: "a service's log file cannot be written; its lines are dropped",
      service: "risk",
      code: "ENOSPC",
    }),
  ]);
});

it.each([
  ["LOOPGUARD_LIVENESS_PERIOD_MS", "ten", 'must be an integer in 100..3600000, got "ten"'],
  ["LOOPGUARD_LIVENESS_TIMEOUT_MS", "50", 'must be an integer in 100..600000, got "50"'],
  ["LOOPGUARD_LIVENESS_FAILURES", "-1", 'must be an integer in 0..100, got "-1"'],
])("refuses %s=%s with one line naming it, before it starts a service", (variable, value, complaint) => {
  const dir = join(tempFolder(), "data");
  const run = start(dir, {}, { [variable]: value });
  expect(run.stderr).toBe(`loopguard: ${variable} ${complaint}\n`);
  expect(run.status).toBe(1);
  expect(existsSync(join(dir, "keys"))).toBe(false);
});
