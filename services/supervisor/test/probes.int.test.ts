// The supervisor's probes with real service processes and real signals: a restarted service is
// ready again only once it answers SERVING, and is killed and tried again when it does not.
import { join } from "node:path";
import { checkHealth } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";
import { eventually, fixture, fixtureEnvironment, risk, runCleanups, supervise } from "./harness.js";

afterEach(runCleanups);

type Line = Record<string, unknown>;
const said = (logged: Line[], msg: string) => logged.filter((l) => l.msg === msg);

describe("Supervisor probes", () => {
  it("says when a restarted service serves again, with the new process answering SERVING", async () => {
    const spec = await risk();
    const { supervisor, logged } = supervise(fixtureEnvironment);
    await supervisor.start([spec]);
    const first = supervisor.pids().risk!;
    process.kill(first, "SIGKILL");
    const back = await eventually(() => said(logged, "service serving again")[0], 30_000, "serving again");
    expect(back).toMatchObject({ level: "info", service: "risk", count: 1, pid: supervisor.pids().risk });
    expect(back.pid).not.toBe(first);
    expect(back.duration_ms).toEqual(expect.any(Number));
    expect(logged.indexOf(said(logged, "service exited; restarting")[0]!)).toBeLessThan(logged.indexOf(back));
    expect(await checkHealth(`127.0.0.1:${spec.port}`)).toBe("SERVING");
  });

  it("kills a restarted service that is not SERVING within the ready timeout and tries again with backoff", async () => {
    const spec = { ...(await risk()), entry: fixture("broken-after-restart.mjs") };
    const serviceEntry = (await risk()).entry;
    const { supervisor, logged } = supervise(
      (dataDir) => {
        const environment = fixtureEnvironment(dataDir);
        const env = { FIXTURE_STARTED_FILE: join(dataDir, "started"), FIXTURE_SERVICE_ENTRY: serviceEntry };
        return { ...environment, env: { ...environment.env, ...env } };
      },
      // The first start is a real risk's, so this is generous for a busy machine.
      { readyTimeoutMs: 15_000 },
    );
    await supervisor.start([spec]);
    process.kill(supervisor.pids().risk!, "SIGKILL");
    const stuck = await eventually(
      () => said(logged, "service not SERVING after its restart; killing it")[0],
      60_000,
      "the restarted process killed",
    );
    expect(stuck).toMatchObject({ level: "warn", service: "risk", count: 1, ready_timeout_ms: 15_000 });
    const exits = await eventually(
      () =>
        said(logged, "service exited; restarting").length >= 2 ? said(logged, "service exited; restarting") : undefined,
      10_000,
      "the second exit",
    );
    expect(exits.map((e) => [e.signal, e.count, e.restart_in_ms])).toEqual([
      ["SIGKILL", 1, 100],
      ["SIGKILL", 2, 200],
    ]);
    expect(() => process.kill(stuck.pid as number, 0)).toThrow(/ESRCH/);
    expect(said(logged, "service serving again")).toEqual([]);
  }, 120_000);
});
