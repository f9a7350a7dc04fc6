// The host's own live reads before a money call (the order from billing, its customer's risk from
// risk, the order again when an approval is answered) are tool calls of the session: each one sent
// is charged to its budgets, and a session whose budgets cannot hold the reads and the call stops
// before reading, on the first pass and when an approval is answered alike. Real tool processes, a real orchestrator in process, the tools' own metrics.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { costOf, readsOf, refund, scriptedModel, session, startSession } from "./guard-read-fixture.js";
import { decisionOn, HIGH_RISK_CUSTOMER, refundsOf, startRefund, useSuite, waitForSession } from "./harness.js";

// Tools started one after another: on a busy machine three cold starts at once can each miss their start-up timeout.
const suite = useSuite({ orchestrator: false, tools: { inTurn: true } });
const reads = () => readsOf(suite);

describe("the host's live reads are charged to the session", () => {
  it("five refunds the guard refuses (above what the order may still move): every GetOrder it sent is in the session's tool calls and cost", async () => {
    const asks = [20_000, 20_001, 20_002, 20_003, 20_004].map((amount, i) =>
      refund(`r${i}`, "ord_DEMO00000001", amount),
    );
    const model = scriptedModel([
      () => ({ kind: "tool_calls", calls: asks }),
      () => ({ kind: "final", answer: "None of the refunds could be made: the order has less left to refund." }),
    ]);
    const orch = await suite.startOrchestrator({}, { policies: [model] });
    const before = await reads();
    const done = await session(orch, { kind: "refund", order_id: "ord_DEMO00000001" });
    const after = await reads();
    expect(done.stopReason).toBe("done");
    expect(await refundsOf(suite.tools, "ord_DEMO00000001")).toHaveLength(0);
    // Each refund read the order once: a guarded call is planned from the stored decision only. A
    // slow read may be hedged: its second attempt is a retry of the session's, not another call.
    expect(after.orders - before.orders).toBe(asks.length + done.usage!.retries);
    expect(after.risks - before.risks).toBe(0);
    expect(done.usage?.toolCalls).toBe(asks.length);
    expect(Number(done.usage?.costMicros)).toBe(asks.length * costOf("billing_get_order"));
  });

  it.each([
    ["max_tool_calls", { maxToolCalls: 2 }, /max tool calls reached/],
    ["max_cost", { maxCostMicros: 1500n }, /max cost reached/],
  ] as const)(
    "%s: a budget without room for the reads and the call stops the session before it reads, and nothing is refunded",
    async (reason, budget, words) => {
      const model = scriptedModel([() => ({ kind: "tool_calls", calls: [refund("r1", "ord_DEMO00000001", 100)] })]);
      const orch = await suite.startOrchestrator({}, { policies: [model] });
      const before = await reads();
      const done = await session(orch, { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 100 }, budget);
      expect(done.stopReason).toBe(reason);
      expect(done.answer).toMatch(words);
      expect(done.answer).toMatch(
        /^stopped before calling billing_refund: .* the host reads billing_get_order and risk_get_customer_risk live before it, and with the call that is 3 tool calls costing 1550 micro-units, .*nothing was executed$/,
      );
      expect(await reads()).toEqual(before);
      expect(done.usage?.toolCalls).toBe(0);
      expect(await refundsOf(suite.tools, "ord_DEMO00000001")).toHaveLength(0);
    },
  );

  it("a second refund without room for its reads: the stop names the refund already made", async () => {
    const model = scriptedModel([
      () => ({ kind: "tool_calls", calls: [refund("r1", "ord_DEMO00000002", 100)] }),
      () => ({ kind: "tool_calls", calls: [refund("r2", "ord_DEMO00000002", 200)] }),
    ]);
    const orch = await suite.startOrchestrator({}, { policies: [model] });
    const task = { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 300 };
    const done = await session(orch, task, { maxToolCalls: 5 });
    expect(done.stopReason).toBe("max_tool_calls");
    // The first refund's two reads and its call.
    expect(done.usage?.toolCalls).toBe(3);
    expect(done.answer).toMatch(/^stopped before calling billing_refund: max tool calls reached: .*; already done: /);
    expect((await refundsOf(suite.tools, "ord_DEMO00000002")).map((r) => Number(r.amountCents))).toEqual([100]);
  });

  it("the order read again when an approval is answered is charged with the call it lets through", async () => {
    const orch = await suite.startOrchestrator();
    const id = await startRefund(orch.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
    const waiting = await waitForSession(orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
    const before = await reads();
    await orch.approver.resolveApproval(decisionOn(id, waiting.pendingApproval!, true, "checked"));
    const done = await waitForSession(orch.api, id);
    const after = await reads();
    expect(done.stopReason).toBe("done");
    expect(after.orders - before.orders).toBe(1);
    // The read again, and the refund itself.
    expect(done.usage!.toolCalls - waiting.usage!.toolCalls).toBe(2);
    expect(Number(done.usage!.costMicros) - Number(waiting.usage!.costMicros)).toBe(
      costOf("billing_get_order") + costOf("billing_refund"),
    );
  });

  it.each([
    ["max_tool_calls", { maxToolCalls: 3 }, /max tool calls reached/],
    [
      "max_cost",
      {
        maxCostMicros: BigInt(
          costOf("billing_get_order") + costOf("risk_get_customer_risk") + costOf("billing_refund"),
        ),
      },
      /max cost reached/,
    ],
  ] as const)(
    "%s: an approval whose read again and call the budget cannot hold stops the session before the read, and nothing is refunded",
    async (reason, budget, words) => {
      const model = scriptedModel([() => ({ kind: "tool_calls", calls: [refund("r1", "ord_DEMO00000008", 100)] })]);
      const orch = await suite.startOrchestrator({}, { policies: [model] });
      const id = await startSession(orch, { kind: "refund", order_id: "ord_DEMO00000008", amount_cents: 100 }, budget);
      // The first pass fits: both reads and the call; the customer's risk asks a person.
      const waiting = await waitForSession(orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
      expect(waiting.usage?.toolCalls).toBe(2);
      const before = await reads();
      const refunds = (await refundsOf(suite.tools, "ord_DEMO00000008")).length;
      await orch.approver.resolveApproval(decisionOn(id, waiting.pendingApproval!, true, "checked"));
      const done = await waitForSession(orch.api, id);
      expect(done.stopReason).toBe(reason);
      expect(done.answer).toMatch(words);
      expect(done.answer).toMatch(
        /^stopped before calling billing_refund: .* the host reads billing_get_order live before it, and with the call that is 2 tool calls costing 1050 micro-units, .*nothing was executed/,
      );
      expect(await reads()).toEqual(before);
      expect(done.usage).toMatchObject({ toolCalls: waiting.usage!.toolCalls, costMicros: waiting.usage!.costMicros });
      expect(await refundsOf(suite.tools, "ord_DEMO00000008")).toHaveLength(refunds);
    },
  );
});
