// A cancel that reaches another replica than the one running the session, while that run's irreversible call is
// in flight: the running replica hears of it through PostgreSQL (announceAbort) and stops once the call is
// recorded, as a cancel on its own replica would make it, so the session ends CANCELLED naming the refund made
// and nothing more is called.
import { setTimeout as sleep } from "node:timers/promises";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  isEnded,
  LOW_RISK_CUSTOMER,
  refundsOf,
  setFaults,
  startOrchestrator,
  startRefund,
  startTools,
  type TestOrchestrator,
  type Tools,
  waitForSession,
} from "./harness.js";

const ORDER = "ord_DEMO00000001";
const SESSIONS = 3;

const postgres = testPostgres("cancel-across-replicas");
describe.skipIf(postgres.skip !== null)("a cancel on one replica, an irreversible call in flight on another", () => {
  let tools: Tools;
  let a: TestOrchestrator;
  let b: TestOrchestrator;
  beforeAll(async () => {
    await postgres.start();
    const url = await postgres.freshDatabase();
    tools = await startTools();
    a = await startOrchestrator(tools, { ORCHESTRATOR_STORE: url, ORCHESTRATOR_INSTANCE_ID: "replica-a" });
    b = await startOrchestrator(tools, { ORCHESTRATOR_STORE: url, ORCHESTRATOR_INSTANCE_ID: "replica-b" });
  }, 180_000);
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await tools?.stop();
    await postgres.stop();
  }, 60_000);

  it("ends the session CANCELLED naming the refund made, with no further refund", async () => {
    await setFaults(tools, "billing", { addedLatencyMs: 1500, methods: ["Refund"] });
    const before = (await refundsOf(tools, ORDER)).length;
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i += 1) ids.push(await startRefund(a.api, ORDER, 200, LOW_RISK_CUSTOMER));
    // Each session's refund is in flight on replica A.
    const owners: (string | null)[] = [];
    for (const id of ids) {
      let s = await a.orchestrator.store.get(id);
      while (!(s?.state === "TOOL_EXECUTING" && JSON.stringify(s.pending).includes("billing_refund"))) {
        await sleep(10);
        s = await a.orchestrator.store.get(id);
      }
      owners.push(s.leaseOwner);
    }
    await setFaults(tools, "billing", {});
    expect(owners.filter((owner) => !owner?.startsWith("replica-a/"))).toEqual([]);

    const cancelled = await Promise.all(ids.map((id) => b.api.cancelSession({ sessionId: id, reason: "stop" })));
    const ends = await Promise.all(ids.map((id) => waitForSession(a.api, id, isEnded, 30_000)));
    // Whatever A would have done next had time to start by now.
    await sleep(2000);
    expect(cancelled.map((r) => SessionState[r.session!.state])).toEqual(ids.map(() => "CANCELLED"));
    for (const s of ends) {
      expect(SessionState[s.state]).toBe("CANCELLED");
      expect(s.answer).toMatch(/^cancelled by [^;]*: stop; already done before the cancel: billing_refund refund:rf_/);
    }
    expect((await refundsOf(tools, ORDER)).length - before).toBe(SESSIONS);
  }, 120_000);
});
