// `pnpm patrol` when the orchestrator stops answering part way (real processes, the patrol reaching
// the orchestrator through a TCP proxy the test drops): a task cut off by UNAVAILABLE is a failed
// task of a run that is still recorded, so the patrol's gauges and alerts see it, and the CLI exits 1
// with one line naming the problem; with nothing listening any more, the line says the run is not recorded.
// A command line it cannot use is bad usage (exit 2), whatever node's wording for it.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { startTcpProxy, type TcpProxy } from "@loopguard/sql-store/testing";
import { repoRoot } from "@loopguard/test-kit";
import { createRawClient, ensureLocalKeys, type RawClient } from "@loopguard/tool-sdk";
import { localPersonToken, TEST_PUBLIC_KEYS } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setFaults, startTools, type Tools } from "./harness.js";
import { processFixture } from "./process-fixture.js";

const PATROL = join(repoRoot, "services", "orchestrator", "dist", "cli", "patrol.js");
const { tempDir, startOrchestrator, cleanUp, track, onCleanUp } = processFixture("patrol-cut");

let dataDir: string;
let tasksFile: string;
let proxy: TcpProxy;
let operator: RawClient<typeof OrchestratorService>;
let tools: Tools;

beforeAll(async () => {
  dataDir = tempDir("data");
  // The orchestrator trusts the local people's keys (the patrol's) beside the test keys its tools know it by.
  const local = JSON.parse(readFileSync(ensureLocalKeys(dataDir).jwks, "utf8")) as {
    keys: { loopguard_role: string }[];
  };
  const jwks = { keys: [...TEST_PUBLIC_KEYS.keys, ...local.keys.filter((k) => k.loopguard_role === "person")] };
  // A first start on a busy machine can take longer than the default wait.
  tools = await startTools({ timeoutMs: 60_000 });
  onCleanUp(() => tools.stop());
  const orchestrator = await startOrchestrator(tools, {
    LOOPGUARD_JWKS: JSON.stringify(jwks),
    LOOPGUARD_DATA_DIR: tempDir("orchestrator"),
  });
  proxy = await startTcpProxy(Number(orchestrator.address.split(":").at(-1)));
  const golden = readFileSync(join(repoRoot, "test", "golden", "tasks.jsonl"), "utf8").split("\n");
  tasksFile = join(dataDir, "questions.jsonl");
  writeFileSync(
    tasksFile,
    `${["question-01", "question-02"].map((id) => golden.find((l) => l.includes(`"${id}"`))).join("\n")}\n`,
  );
  const token = await localPersonToken(dataDir, "operator", "orchestrator", [
    "sessions:read",
    "sessions:admin",
    "patrol:report",
  ]);
  operator = track(createRawClient(OrchestratorService, orchestrator.address, { token }));
}, 120_000);

afterAll(async () => {
  await proxy?.close();
  await cleanUp();
});

function patrol(): { exit: Promise<{ code: number | null; stdout: string; stderr: string }> } {
  const child = spawn(
    process.execPath,
    [PATROL, "--orchestrator", `127.0.0.1:${proxy.port}`, "--tasks", tasksFile, "--concurrency", "1"],
    {
      env: { ...process.env, LOOPGUARD_DATA_DIR: dataDir },
      cwd: repoRoot,
    },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  return { exit: new Promise((done) => child.once("exit", (code) => done({ code, stdout, stderr }))) };
}

/** Each search takes 3 s, so the session started is still being watched when the test drops the connection. */
const slowSearch = () => setFaults(tools, "kb-search", { addedLatencyMs: 3000 });

/** Waits until the orchestrator holds `n` sessions. */
async function sessions(n: number): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if ((await operator.listSessions({ pageSize: 50 })).sessions.length >= n) return;
    await sleep(50);
  }
  throw new Error(`no ${n} sessions in 30 s`);
}

describe("pnpm patrol against an orchestrator that stops answering", () => {
  it("records a run whose task was cut off by UNAVAILABLE as failed, with what happened, and exits 1 with one line", async () => {
    await slowSearch();
    const run = patrol();
    await sessions(1);
    // The connection drops under the first task's watch: the patrol sees UNAVAILABLE for it, then connects again.
    proxy.restore();
    await setFaults(tools, "kb-search", {});
    const { code, stdout, stderr } = await run.exit;
    expect(code).toBe(1);
    expect(stderr).toMatch(
      /^patrol: 1 of 2 tasks cut off: the orchestrator answered UNAVAILABLE \(question-01: .+\); the run is recorded with them failed\n$/,
    );
    expect(stdout).toMatch(/success\s+1\/2 = 50\.0% by outcome/);
    const [recorded] = (await operator.listPatrolRuns({ limit: 1 })).runs;
    expect(recorded).toMatchObject({ tasks: 2, passed: 1, stopReasons: { "cut_off:UNAVAILABLE": 1, done: 1 } });
    expect(recorded!.mismatches).toEqual([
      expect.objectContaining({ taskId: "question-01", got: expect.stringMatching(/^cut off: UNAVAILABLE /) }),
    ]);
  }, 120_000);

  it("says in one line that the run could not be recorded when nothing listens any more, and exits 1", async () => {
    const before = (await operator.listPatrolRuns({ limit: 100 })).runs.length;
    await slowSearch();
    const run = patrol();
    await sessions(3);
    await proxy.close();
    const { code, stderr } = await run.exit;
    expect(code).toBe(1);
    expect(stderr).toMatch(
      /^patrol: 2 of 2 tasks cut off: the orchestrator answered UNAVAILABLE \(question-01: .+\); the run could not be recorded: .+\n$/,
    );
    expect((await operator.listPatrolRuns({ limit: 100 })).runs).toHaveLength(before);
  }, 120_000);
});

describe("pnpm patrol's command line", () => {
  it.each([
    ["--live=1", "Option '--live' does not take an argument"],
    ["--json=1", "Option '--json' does not take an argument"],
    ["--bogus", "Unknown option '--bogus'"],
  ])("%s: bad usage naming the flag, then the usage, exit 2", (flag, message) => {
    const run = spawnSync(process.execPath, [PATROL, flag], {
      env: { ...process.env, LOOPGUARD_DATA_DIR: dataDir },
      cwd: repoRoot,
      encoding: "utf8",
      timeout: 15_000,
    });
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(new RegExp(`^patrol: ${message}[^\\n]*\\nusage: pnpm patrol `));
  });
});
