// Services as `pnpm start`'s supervisor runs them (LOOPGUARD_SUPERVISED=1, stdin a pipe from the
// supervisor): a supervisor that is gone, even by SIGKILL (its pipes all closed at once), leaves no
// service running on without it, and a log pipe whose reader is gone costs a service its lines,
// never its life. The orchestrator writes its log through its own line writer, a tool through the
// default one: both are run.
import { spawnService, tempDir } from "@loopguard/test-kit";
import { checkHealth, TEST_AUTH_ENV, testOrchestratorEnv, workspaceService } from "@loopguard/tool-sdk/testing";
import { afterAll, describe, expect, it } from "vitest";

const data = tempDir("supervised");
afterAll(() => data.remove());

const SERVICES: Record<string, Record<string, string>> = {
  orchestrator: {
    ...testOrchestratorEnv(),
    ORCHESTRATOR_PORT: "0",
    ORCHESTRATOR_HTTP_PORT: "0",
    // No session is started: the tools are never dialled.
    KB_SEARCH_ADDR: "127.0.0.1:1",
    BILLING_ADDR: "127.0.0.1:1",
    RISK_ADDR: "127.0.0.1:1",
  },
  "kb-search": { ...TEST_AUTH_ENV, KB_SEARCH_PORT: "0", KB_SEARCH_METRICS_PORT: "0" },
};

describe.each(Object.keys(SERVICES))("%s, run by the supervisor", (service) => {
  const supervised = () =>
    spawnService(
      workspaceService(service).entry,
      { ...SERVICES[service], LOOPGUARD_DATA_DIR: data.dir, LOOPGUARD_SUPERVISED: "1" },
      30_000,
      "pipe",
    );

  it("drains and exits 0 when the supervisor's pipe ends", async () => {
    const proc = await supervised();
    proc.child.stdin!.end();
    expect(await proc.exited).toBe(0);
    expect(proc.lines.map((line) => line.msg)).toEqual(expect.arrayContaining(["supervisor gone", "stopped"]));
  });

  it("exits 0 when every pipe of the supervisor closes at once, as when it is killed", async () => {
    const proc = await supervised();
    proc.child.stdout!.destroy();
    proc.child.stderr!.destroy();
    proc.child.stdin!.destroy();
    expect(await proc.exited).toBe(0);
  });

  it("serves on, and stops cleanly, once nothing reads its log", async () => {
    const proc = await supervised();
    proc.child.stdout!.destroy();
    proc.child.stderr!.destroy();
    // Its shutdown writes lines into the broken pipe (EPIPE).
    expect(await checkHealth(proc.address, "", 10_000)).toBe("SERVING");
    proc.child.kill("SIGTERM");
    expect(await proc.exited).toBe(0);
  });
});
