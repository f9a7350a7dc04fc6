// The host's own live reads before a money call (the order from billing, its customer's risk from
// risk, the order again when an approval is answered) are tool calls of the session: each one sent
// is charged to its budgets, and a session whose budgets cannot hold the reads and the call stops
// before reading. Real tool processes, a real orchestrator in process, the tools' own metrics.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import type { Decision, Policy, PolicyInput } from "../src/policies/policy.js";
import { ToolRegistry } from "../src/tool-registry.js";
import {
  ALL_SCOPES,
  decisionOn,
  HIGH_RISK_CUSTOMER,
  refundsOf,
  startRefund,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const suite = useSuite({ orchestrator: false });
const registry = new ToolRegistry();
const costOf = (tool: string) => registry.get(tool)!.costMicros;

/** A model of the test's own: each step's decision from `steps`, its calls and answers costing nothing. */
function scriptedModel(steps: ((input: PolicyInput) => Omit<Decision, "usage" | "promptHash">)[]): Policy {
  return {
    name: "openai",
    async decide(input) {
      return { ...steps[input.step - 1]!(input), usage: { input: 1, output: 1 }, promptHash: "" } as Decision;
    },
  };
}

const refund = (id: string, orderId: string, amountCents: number) => ({
  id,
  name: "billing_refund",
  arguments: JSON.stringify({ orderId, amountCents, reason: "REFUND_REASON_DAMAGED" }),
});

/** How many calls of `method` the tool has handled, from its own metrics. */
async function handled(tool: "billing" | "risk", method: string): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${suite.tools[tool].metricsPort}/metrics`)).text();
  return page
    .split("\n")
    .filter((line) => line.startsWith("grpc_server_handled_total{") && line.includes(`grpc_method="${method}"`))
    .reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0);
}

const reads = async () => ({
  orders: await handled("billing", "GetOrder"),
  risks: await handled("risk", "GetCustomerRisk"),
});

async function session(orch: TestOrchestrator, task: object, budget: object = {}) {
  const { session } = await orch.api.startSession({
    goal: "Refund",
    task: task as never,
    scopes: ALL_SCOPES,
    policy: "openai",
    budget: budget as never,
  });
  return waitForSession(orch.api, session!.sessionId);
}

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
    const orders = after.orders - before.orders;
    // Each refund read the order once: a guarded call is planned from the stored decision only.
    expect(orders).toBe(asks.length);
    expect(after.risks - before.risks).toBe(0);
    expect(done.usage?.toolCalls).toBe(orders);
    expect(Number(done.usage?.costMicros)).toBe(orders * costOf("billing_get_order"));
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
});
