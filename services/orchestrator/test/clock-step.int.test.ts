// A step of the machine's wall clock (an NTP correction, a person setting it) on the SQLite store's
// one process, while a session's tool call is in flight: the process keeps its own lease, the call
// is not re-issued, and the step is logged. Real tool processes, the clock the orchestrator reads
// stepped by the test.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { ALL_SCOPES, setFaults, startOrchestrator, useSuite, waitForSession } from "./harness.js";

const STEP_MS = 30_000;
const suite = useSuite({ orchestrator: false });

describe("the wall clock stepped 30 s ahead during a tool call, on SQLite", () => {
  it("keeps the session's lease: the call is made once, nothing counted lost or retried, and the step is logged", async () => {
    let offset = 0;
    const orch = await startOrchestrator(
      suite.tools,
      { ORCHESTRATOR_LEASE_TTL_MS: "600" },
      { now: () => Date.now() + offset },
    );
    suite.onCleanUp(() => orch.close());
    await setFaults(suite.tools, "kb-search", { addedLatencyMs: 700, methods: ["Search"] });
    suite.onCleanUp(() => setFaults(suite.tools, "kb-search", {}));
    const { session } = await orch.api.startSession({
      goal: "What is the warranty on cables?",
      task: {},
      scopes: ALL_SCOPES,
      policy: "scripted",
      budget: { maxWallClockMs: 120_000 },
    });
    await sleep(250);
    offset = STEP_MS;
    const done = await waitForSession(orch.api, session!.sessionId, undefined, 30_000);
    expect([SessionState[done.state], done.stopReason]).toEqual(["DONE", "done"]);
    expect([done.usage!.toolCalls, done.usage!.retries]).toEqual([1, 0]);
    const lost = await orch.registry.getSingleMetric("loopguard_session_leases_lost_total")!.get();
    expect(lost.values.reduce((sum, v) => sum + v.value, 0)).toBe(0);
    // The step as seen: 30 s, give or take the millisecond the wall clock's reading is rounded to.
    const told = orch.logs.flatMap((line) => {
      const step = /this machine's clock stepped by (\d+) ms; the store's clock closes the gap/.exec(line)?.[1];
      return step === undefined ? [] : [Math.abs(Number(step) - STEP_MS) <= 2];
    });
    expect(told).toEqual([true]);
  }, 60_000);
});
