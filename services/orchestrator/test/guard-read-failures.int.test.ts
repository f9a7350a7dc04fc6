// The host's live reads that fail, are refused or are retried are charged as a model-requested
// call is: a read that went out is one tool call at its price whatever came of it, each attempt
// past its first a retry of the session's, charged with it (so a session a cancel ended before it
// moved again counts them); one the tool client refused before sending (its breaker open) costs
// nothing. Real tool processes, a real orchestrator in process, the tools'
// own metrics, faults switched on through the tools' admin RPC.
import { setTimeout as sleep } from "node:timers/promises";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { costOf, handled, refund, scriptedModel, startSession } from "./guard-read-fixture.js";
import { refundsOf, setFaults, type TestOrchestrator, useSuite, waitForSession } from "./harness.js";

// Tools started one after another: on a busy machine three cold starts at once can each miss their start-up timeout.
const suite = useSuite({ orchestrator: false, tools: { inTurn: true } });
const orders = () => handled(suite, "billing", "GetOrder");
const parked = (s: Session) => s.state === SessionState.PARKED;
const task = (orderId: string) => ({ kind: "refund", order_id: orderId, amount_cents: 100 });

/** An orchestrator whose model asks for one refund of 100 of the task's order, then answers. */
function refundOrchestrator(orderId: string): Promise<TestOrchestrator> {
  const model = scriptedModel([
    () => ({ kind: "tool_calls", calls: [refund("r1", orderId, 100)] }),
    () => ({ kind: "final", answer: "Refunded." }),
  ]);
  return suite.startOrchestrator({}, { policies: [model] });
}

/** Switches billing's GetOrder to an outage for the test (answers given with `retryAfterMs`), cleared after it. */
async function billingDown(retryAfterMs: number): Promise<void> {
  suite.onCleanUp(() => setFaults(suite.tools, "billing", {}));
  await setFaults(suite.tools, "billing", { outage: true, retryAfterMs, methods: ["GetOrder"] });
}

/** The orchestrator's breaker state for `tool` (0 closed, 1 half-open, 2 open), from its metrics. */
async function breakerState(orch: TestOrchestrator, tool: string): Promise<number> {
  const metric = await orch.registry.getSingleMetric("loopguard_tool_breaker_state")!.get();
  return metric.values.find((v) => v.labels.tool === tool)?.value ?? 0;
}

async function until(what: string, holds: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await holds())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await sleep(10);
  }
}

describe("the host's live reads that fail or are retried", () => {
  it("a GetOrder sent to a billing that is down is charged: one tool call at its price, and the session parks", async () => {
    const orch = await refundOrchestrator("ord_DEMO00000003");
    // Its RetryInfo is past the read's deadline: one attempt, no retry, and a long park.
    await billingDown(60_000);
    const before = await orders();
    const id = await startSession(orch, task("ord_DEMO00000003"));
    const waiting = await waitForSession(orch.api, id, parked);
    expect((await orders()) - before).toBe(1);
    expect(waiting.usage).toMatchObject({ toolCalls: 1, costMicros: BigInt(costOf("billing_get_order")), retries: 0 });
    await orch.api.cancelSession({ sessionId: id, reason: "test over" });
  });

  it("a GetOrder the orchestrator's open breaker refused before sending costs nothing", async () => {
    const orch = await refundOrchestrator("ord_DEMO00000002");
    await billingDown(0);
    // A first session's reads fail until billing's breaker opens (every attempt fails).
    const first = await startSession(orch, task("ord_DEMO00000002"));
    await until("billing's breaker opened", async () => (await breakerState(orch, "billing")) === 2);
    await orch.api.cancelSession({ sessionId: first, reason: "it opened the breaker" });
    const before = await orders();
    const second = await startSession(orch, task("ord_DEMO00000002"));
    const waiting = await waitForSession(orch.api, second, parked);
    // Nothing reached billing for it: the breaker refused the read before sending.
    expect((await orders()) - before).toBe(0);
    expect(waiting.usage).toMatchObject({ toolCalls: 0, costMicros: 0n, retries: 0 });
    await orch.api.cancelSession({ sessionId: second, reason: "test over" });
  });

  it("a GetOrder retried after UNAVAILABLE is charged once, and each attempt past its first is a retry of the session's", async () => {
    const orch = await refundOrchestrator("ord_DEMO00000001");
    await billingDown(300);
    const before = { orders: await orders(), risks: await handled(suite, "risk", "GetCustomerRisk") };
    const id = await startSession(orch, task("ord_DEMO00000001"));
    // The first attempt failed: billing is back for the retry.
    await until("billing handled the first attempt", async () => (await orders()) > before.orders);
    await setFaults(suite.tools, "billing", {});
    const done = await waitForSession(orch.api, id);
    expect(done.stopReason).toBe("done");
    expect(await refundsOf(suite.tools, "ord_DEMO00000001")).toHaveLength(1);
    const sent = {
      orders: (await orders()) - before.orders,
      risks: (await handled(suite, "risk", "GetCustomerRisk")) - before.risks,
    };
    const usage = done.usage!;
    expect(usage.retries).toBeGreaterThanOrEqual(1);
    // Every attempt that reached a tool is a tool call of the session (the reads, the refund) or one of its retries.
    expect(sent.orders + sent.risks + 1).toBe(usage.toolCalls + usage.retries);
    const readsCharged = usage.toolCalls - sent.risks - 1;
    expect(Number(usage.costMicros)).toBe(
      readsCharged * costOf("billing_get_order") +
        sent.risks * costOf("risk_get_customer_risk") +
        costOf("billing_refund"),
    );
    expect(readsCharged).toBeLessThan(sent.orders);
  });

  it("a GetOrder retried after a cancel ended the session keeps its retries: the ended session's usage counts them with the read", async () => {
    const orch = await refundOrchestrator("ord_DEMO00000005");
    await billingDown(300);
    const before = await orders();
    const id = await startSession(orch, task("ord_DEMO00000005"));
    // The read's first attempt failed; the session is cancelled before its retry, so the run never moves it again.
    await until("billing handled the first attempt", async () => (await orders()) > before);
    const { session: cancelled } = await orch.api.cancelSession({ sessionId: id, reason: "while the host reads" });
    expect(cancelled!.state).toBe(SessionState.CANCELLED);
    await setFaults(suite.tools, "billing", {});
    const charged = await waitForSession(orch.api, id, (s) => (s.usage?.toolCalls ?? 0) >= 1);
    const sent = (await orders()) - before;
    expect(sent).toBeGreaterThanOrEqual(2);
    // The read is charged as one tool call, and each attempt past its first as a retry, in one write
    // (the risk read after it, if the guard got that far, was not retried).
    expect(charged.state).toBe(SessionState.CANCELLED);
    expect(charged.usage!.retries).toBe(sent - 1);
  });

  it("two reads of one guard pass retried share the session's retry budget: the second gets what the first left", async () => {
    const orch = await refundOrchestrator("ord_DEMO00000009");
    const risks = () => handled(suite, "risk", "GetCustomerRisk");
    suite.onCleanUp(() => setFaults(suite.tools, "risk", {}));
    await billingDown(300);
    const before = { orders: await orders(), risks: await risks() };
    const id = await startSession(orch, task("ord_DEMO00000009"), { maxRetries: 1 });
    // GetOrder's first attempt failed and its retry takes the one retry there is; the risk read's first attempt fails too.
    await until("billing handled the first attempt", async () => (await orders()) > before.orders);
    await setFaults(suite.tools, "risk", { outage: true, retryAfterMs: 300, methods: ["GetCustomerRisk"] });
    await setFaults(suite.tools, "billing", {});
    await until("risk handled the first attempt", async () => (await risks()) > before.risks);
    await setFaults(suite.tools, "risk", {});
    const done = await waitForSession(orch.api, id);
    expect(done.usage!.retries).toBeLessThanOrEqual(1);
    expect(await refundsOf(suite.tools, "ord_DEMO00000009")).toHaveLength(1);
  });
});
