// The supervisor's probes with real service processes and real signals: a restarted service is
// ready again only once it answers SERVING (and is killed and tried again when it does not), and
// one that stops answering (frozen by SIGSTOP) is killed and restarted after a run of failed
// liveness checks, while a shorter run of failures leaves it alone.
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { checkHealth } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";
import { cleanups, eventually, fixture, fixtureEnvironment, risk, runCleanups, supervise } from "./harness.js";

afterEach(runCleanups);

type Line = Record<string, unknown>;
const said = (logged: Line[], msg: string) => logged.filter((l) => l.msg === msg);

/** Cleanup for a process a test stops: a stopped child left behind would hold its ports and its supervisor's stop. */
function neverLeaveStopped(pid: number): void {
  cleanups.push(() => {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone already: the supervisor killed it.
    }
  });
}

/** Risk under a supervisor checking its liveness every 200 ms (500 ms timeout), then frozen by SIGSTOP. */
async function frozenRisk(failureThreshold: number) {
  const spec = await risk();
  const { supervisor, logged } = supervise(fixtureEnvironment, {
    liveness: { periodMs: 200, timeoutMs: 500, failureThreshold },
  });
  await supervisor.start([spec]);
  const pid = supervisor.pids().risk!;
  neverLeaveStopped(pid);
  process.kill(pid, "SIGSTOP");
  return { spec, supervisor, logged, pid };
}

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

  it("kills a frozen service after its liveness checks fail the threshold in a row, and restarts it", async () => {
    const { spec, supervisor, logged, pid: frozen } = await frozenRisk(3);
    const killed = await eventually(
      () => said(logged, "service failed its liveness checks; killing it")[0],
      30_000,
      "the liveness kill",
    );
    expect(killed).toMatchObject({ level: "warn", service: "risk", pid: frozen, failed_checks: 3 });
    expect(killed.error_message).toMatch(/deadline/i);
    // The last run of failures, which an answer on a busy machine before the freeze would not be part of.
    const failures = said(logged, "service failed a liveness check").filter((l) => l.pid === frozen);
    expect(failures.slice(-3).map((l) => l.failed_checks)).toEqual([1, 2, 3]);
    const back = await eventually(() => said(logged, "service serving again")[0], 30_000, "serving again");
    expect(back).toMatchObject({ service: "risk", count: 1, pid: supervisor.pids().risk });
    expect(said(logged, "service exited; restarting")[0]).toMatchObject({ signal: "SIGKILL" });
    expect(() => process.kill(frozen, 0)).toThrow(/ESRCH/);
    expect(await checkHealth(`127.0.0.1:${spec.port}`)).toBe("SERVING");
  });

  it("leaves alone a service that fails fewer liveness checks in a row than the threshold", async () => {
    const { spec, supervisor, logged, pid: slow } = await frozenRisk(20);
    try {
      await eventually(
        () => said(logged, "service failed a liveness check").find((l) => l.failed_checks === 2),
        20_000,
        "two failed checks",
      );
    } finally {
      process.kill(slow, "SIGCONT");
    }
    await eventually(() => said(logged, "service answers its liveness checks again")[0], 20_000, "answering again");
    // A few more periods in which a kill, had one been due, would show.
    await sleep(1_000);
    expect(said(logged, "service failed its liveness checks; killing it")).toEqual([]);
    expect(said(logged, "service exited; restarting")).toEqual([]);
    expect(supervisor.pids().risk).toBe(slow);
    expect(await checkHealth(`127.0.0.1:${spec.port}`)).toBe("SERVING");
  });

  it("runs no liveness probe with a threshold of 0: a service paused as in a debugger is left alone", async () => {
    const { spec, supervisor, logged, pid: paused } = await frozenRisk(0);
    // Long enough for several checks to time out, had any run.
    await sleep(2_500);
    process.kill(paused, "SIGCONT");
    expect(said(logged, "service failed a liveness check")).toEqual([]);
    expect(said(logged, "service exited; restarting")).toEqual([]);
    expect(supervisor.pids().risk).toBe(paused);
    expect(await checkHealth(`127.0.0.1:${spec.port}`, "", 10_000)).toBe("SERVING");
  });
});
