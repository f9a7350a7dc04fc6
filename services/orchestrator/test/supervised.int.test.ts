// The orchestrator as `pnpm start`'s supervisor runs it (LOOPGUARD_SUPERVISED=1, stdin a pipe from
// the supervisor): a supervisor that is gone, even by SIGKILL, leaves no service running on without
// it, and a log pipe whose reader is gone costs the service its lines, never its life.
import { spawnService, tempDir } from "@loopguard/test-kit";
import { checkHealth, testOrchestratorEnv, workspaceService } from "@loopguard/tool-sdk/testing";
import { afterAll, expect, it } from "vitest";

const data = tempDir("supervised");
afterAll(() => data.remove());

const supervised = () =>
  spawnService(
    workspaceService("orchestrator").entry,
    {
      ...testOrchestratorEnv(),
      LOOPGUARD_DATA_DIR: data.dir,
      LOOPGUARD_SUPERVISED: "1",
      ORCHESTRATOR_PORT: "0",
      ORCHESTRATOR_HTTP_PORT: "0",
      // No session is started: the tools are never dialled.
      KB_SEARCH_ADDR: "127.0.0.1:1",
      BILLING_ADDR: "127.0.0.1:1",
      RISK_ADDR: "127.0.0.1:1",
    },
    30_000,
    "pipe",
  );

it("drains and exits 0 when the supervisor's pipe ends", async () => {
  const proc = await supervised();
  proc.child.stdin!.end();
  expect(await proc.exited).toBe(0);
  expect(proc.lines.map((line) => line.msg)).toEqual(expect.arrayContaining(["supervisor gone", "stopped"]));
});

it("serves on, and stops cleanly, once nothing reads its log", async () => {
  const proc = await supervised();
  proc.child.stdout!.destroy();
  proc.child.stderr!.destroy();
  // Its shutdown writes lines into the broken pipe (EPIPE).
  expect(await checkHealth(proc.address)).toBe("SERVING");
  proc.child.kill("SIGTERM");
  expect(await proc.exited).toBe(0);
});
