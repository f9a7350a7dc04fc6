// The real orchestrator process loads the libraries of the backends its configuration names, and
// no others: the `openai` SDK only with a model endpoint, `pg` only with a PostgreSQL store. Each
// costs every process start CPU (about 140 ms and 90 ms) for nothing when unused. A preloaded hook
// (fixtures/record-modules.mjs) lists every module the process loaded by the time it exits.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { kill, tempDir } from "@loopguard/test-kit";
import { spawnTool, TEST_AUTH_ENV, testOrchestratorEnv, workspaceService } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";

const RECORDER = pathToFileURL(join(import.meta.dirname, "fixtures", "record-modules.mjs")).href;

/** The packages the modules belong to, by name (a path's last node_modules folder). */
function packagesOf(modules: readonly string[]): Set<string> {
  return new Set(modules.flatMap((m) => m.match(/.*\/node_modules\/((?:@[^/]+\/)?[^/]+)\//)?.[1] ?? []));
}

const dirs: (() => void)[] = [];
afterEach(() => {
  for (const remove of dirs.splice(0)) remove();
});

/** An orchestrator's environment on a fresh data folder (tools unreachable: none is called), recording its modules. */
function startEnv(extra: Record<string, string> = {}): { env: Record<string, string>; packages: () => Set<string> } {
  const data = tempDir("start-modules");
  dirs.push(data.remove);
  const file = join(data.dir, "modules.txt");
  const env = {
    ...testOrchestratorEnv(),
    LOOPGUARD_DATA_DIR: data.dir,
    LOOPGUARD_MODULES_FILE: file,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --import=${RECORDER}`,
    ORCHESTRATOR_PORT: "0",
    ORCHESTRATOR_HTTP_PORT: "0",
    KB_SEARCH_ADDR: "127.0.0.1:1",
    BILLING_ADDR: "127.0.0.1:1",
    RISK_ADDR: "127.0.0.1:1",
    ...extra,
  };
  return { env, packages: () => packagesOf(readFileSync(file, "utf8").split("\n")) };
}

/** Starts the orchestrator until it serves, stops it, and returns the packages it loaded. */
async function packagesOfServing(extra: Record<string, string> = {}): Promise<Set<string>> {
  const { env, packages } = startEnv(extra);
  const proc = await spawnTool(workspaceService("orchestrator").entry, env);
  await kill(proc, "SIGTERM");
  return packages();
}

describe("the libraries an orchestrator process loads", () => {
  it("with the default SQLite store and no model endpoint: neither openai nor pg", async () => {
    const loaded = await packagesOfServing();
    expect(loaded).toContain("better-sqlite3");
    expect(loaded).not.toContain("openai");
    expect(loaded).not.toContain("pg");
  });

  it("with a model endpoint: openai, and still not pg", async () => {
    const loaded = await packagesOfServing({ OPENAI_BASE_URL: "http://127.0.0.1:1/v1" });
    expect(loaded).toContain("openai");
    expect(loaded).not.toContain("pg");
  });

  it("with a PostgreSQL store: pg, even when the database cannot be reached", async () => {
    const { env, packages } = startEnv({ ORCHESTRATOR_STORE: "postgres://loopguard@127.0.0.1:1/loopguard" });
    const child = spawn(process.execPath, [workspaceService("orchestrator").entry], {
      env: { ...process.env, ...TEST_AUTH_ENV, ...env },
      stdio: "ignore",
    });
    const code = await new Promise((resolve) => child.once("exit", resolve));
    expect(code).not.toBe(0);
    expect(packages()).toContain("pg");
  });
});
