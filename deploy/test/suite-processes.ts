// What the container tests share: a data folder of their own for `pnpm containers`, the
// package's commands run as processes against it, the docker CLI, and the suite's state file.
import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { SuiteState } from "../src/local/suite/state.js";
import { type Run, runProcess } from "./run-process.js";

export type { Run };

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface SuiteProcesses {
  readonly dataDir: string;
  /** Runs a built script of the repository with LOOPGUARD_DATA_DIR set to the test's folder. */
  run(file: string, args: readonly string[], timeoutMs?: number): Promise<Run>;
  state(): SuiteState;
}

export function suiteProcesses(prefix: string): SuiteProcesses {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  // PostgreSQL runs as its own user when started by root, and must reach its folder inside.
  chmodSync(dataDir, 0o755);
  const env = { ...process.env, LOOPGUARD_DATA_DIR: dataDir };
  return {
    dataDir,
    run: (file, args, timeoutMs = 240_000) =>
      runProcess(process.execPath, [file, ...args], { env, cwd: root, timeoutMs }),
    state: () => JSON.parse(readFileSync(join(dataDir, "containers", "state.json"), "utf8")) as SuiteState,
  };
}

export function docker(args: readonly string[]): Promise<string> {
  return new Promise((done, fail) =>
    execFile("docker", args, { timeout: 300_000 }, (error, stdout, stderr) =>
      error ? fail(new Error(`docker ${args.join(" ")}: ${stderr}`)) : done(stdout.trim()),
    ),
  );
}
