// Money bound to the task's intent and counted the way a payments team counts it: an amount above
// the task's figure (or the session's total above it, a cent at a time) waits for a human who sees
// both figures; another reason than the task's is refused; per-customer totals across orders and
// sessions; thresholds and totals per currency, never adding two; reads limited to what the task
// names or leads to; and a refund that the ledger refuses for a bound the world moved past is
// decided again from a new read. Real tool processes, a real orchestrator, the ledger checked directly.
import { setTimeout as sleep } from "node:timers/promises";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { testToken } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { chatCompletion, toolCall, toolResults } from "./fake-chat-server.js";
import { ALL_SCOPES, decisionOn, refundElsewhere, type TestOrchestrator, waitForSession } from "./harness.js";
import { moneyFixture, waiting } from "./money-fixture.js";

const { tools, orchestrator, withModel, amountsOf: refundsOf, onCleanUp } = moneyFixture();
const refund = (orderId: string, amountCents: number, reason = "REFUND_REASON_DAMAGED") =>
  JSON.stringify({ orderId, amountCents, reason });
const done = () => chatCompletion({ content: "Done." });

async function start(orch: TestOrchestrator, task: Record<string, unknown>, policy = "openai"): Promise<Session> {
  const { session } = await orch.api.startSession({
    goal: "Refund as the task says",
    task: task as never,
    scopes: ALL_SCOPES,
    policy,
  });
  return waitForSession(orch.api, session!.sessionId, waiting);
}

describe("bound to the task's intent", () => {
  it("an amount above the task's waits for a human who sees both figures, and nothing is refunded", async () => {
    const { orch } = await withModel([() => toolCall("billing_refund", refund("ord_DEMO00000001", 5000), "r1")]);
    const s = await start(orch, { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 500, reason: "DAMAGED" });
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(
      /this session would move 5000 USD in total \(this call 5000\), above the task's amount_cents of 500/,
    );
    expect(await refundsOf("ord_DEMO00000001")).toEqual([]);
  });

  it("a cent more each time makes a new idempotency key but counts against the same task total: the second refund waits", async () => {
    const { orch } = await withModel([
      () => toolCall("billing_refund", refund("ord_DEMO00000001", 500), "r1"),
      () => toolCall("billing_refund", refund("ord_DEMO00000001", 501), "r2"),
    ]);
    const s = await start(orch, { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 500, reason: "DAMAGED" });
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(
      /this session would move 1001 USD in total \(this call 501\), above the task's amount_cents of 500/,
    );
    expect(await refundsOf("ord_DEMO00000001")).toEqual([500]);
  });

  it("another reason than the task's is an EPRECOND observation naming the bound, and no call", async () => {
    const { orch, chat } = await withModel([
      () => toolCall("billing_refund", refund("ord_DEMO00000001", 500, "REFUND_REASON_CUSTOMER_REQUEST"), "r1"),
      done,
    ]);
    const s = await start(orch, { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 500, reason: "DAMAGED" });
    expect(s.stopReason).toBe("done");
    const seen = toolResults(chat.requests.at(-1)!).r1!;
    expect(seen.error).toMatchObject({
      code: "EPRECOND",
      message: "billing_refund.reason must be the task's reason (DAMAGED), not REFUND_REASON_CUSTOMER_REQUEST",
    });
    expect(await refundsOf("ord_DEMO00000001")).toEqual([]);
  });

  it("a task that states no amount: a human decides the amount", async () => {
    const { orch } = await withModel([() => toolCall("billing_refund", refund("ord_DEMO00000001", 100), "r1")]);
    const s = await start(orch, { kind: "refund", order_id: "ord_DEMO00000001" });
    expect(s.pendingApproval?.reason).toMatch(
      /the task states no amount_cents, so a human decides the amount \(100 USD\)/,
    );
    expect(await refundsOf("ord_DEMO00000001")).toEqual([]);
  });
});

describe("per customer and per currency", () => {
  it("a customer's total counts across orders and sessions, in its own currency only, and its threshold shows in the reason", async () => {
    const orch = await orchestrator({ APPROVAL_CUSTOMER_AMOUNT_THRESHOLD: "60000" });
    const scripted = (orderId: string, amount: number) =>
      start(orch, { kind: "refund", order_id: orderId, amount_cents: amount, reason: "DAMAGED" }, "scripted");
    expect((await scripted("ord_DEMO00000009", 40_000)).stopReason).toBe("done");
    expect((await scripted("ord_DEMO00000001", 12_000)).stopReason).toBe("done");
    // 30,000 CNY of the same customer: CNY has its own total, which 52,000 USD does not add to.
    expect((await scripted("ord_DEMO00000010", 30_000)).stopReason).toBe("done");
    const third = await scripted("ord_DEMO00000009", 10_000);
    expect(SessionState[third.state]).toBe("AWAITING_APPROVAL");
    expect(third.pendingApproval?.reason).toMatch(
      /customer cust_demo_0001 would get 62000 USD within 24 h across orders and sessions \(52000 already\), above the per-customer threshold of 60000 USD/,
    );
    expect(await refundsOf("ord_DEMO00000009")).toEqual([40_000]);
  });

  it("thresholds are per currency: the same figure passes in USD and waits in CNY where CNY's threshold is lower", async () => {
    const orch = await orchestrator({ APPROVAL_AMOUNT_THRESHOLDS: "CNY:20000" });
    const usd = await start(
      orch,
      { kind: "refund", order_id: "ord_DEMO00000009", amount_cents: 30_000, reason: "DAMAGED" },
      "scripted",
    );
    expect(usd.stopReason).toBe("done");
    const cny = await start(
      orch,
      { kind: "refund", order_id: "ord_DEMO00000010", amount_cents: 30_000, reason: "DAMAGED" },
      "scripted",
    );
    expect(cny.pendingApproval?.reason).toMatch(
      /order ord_DEMO00000010 would have 30000 CNY moved in total \(0 already, across all sessions\), above the approval threshold of 20000 CNY/,
    );
  });

  it("a session's total against its approval threshold never adds two currencies", async () => {
    const { orch } = await withModel(
      [
        () => toolCall("billing_refund", refund("ord_DEMO00000001", 8000), "r1"),
        () => toolCall("billing_refund", refund("ord_DEMO00000010", 8000), "r2"),
        done,
      ],
      {
        APPROVAL_SESSION_AMOUNT_THRESHOLD_CENTS: "10000",
      },
    );
    const s = await start(orch, {
      kind: "refund",
      order_ids: ["ord_DEMO00000001", "ord_DEMO00000010"],
      amount_cents: 16_000,
      reason: "DAMAGED",
    });
    expect(s.stopReason).toBe("done");
    expect([...(await refundsOf("ord_DEMO00000001")), ...(await refundsOf("ord_DEMO00000010"))]).toEqual([8000, 8000]);
  });

  it("the task's figure names no currency: refunds in two currencies both count against it, and the one past it waits for a human", async () => {
    const { orch } = await withModel([
      () => toolCall("billing_refund", refund("ord_DEMO00000001", 8000), "r1"),
      () => toolCall("billing_refund", refund("ord_DEMO00000010", 8000), "r2"),
      done,
    ]);
    const s = await start(orch, {
      kind: "refund",
      order_ids: ["ord_DEMO00000001", "ord_DEMO00000010"],
      amount_cents: 8000,
      reason: "DAMAGED",
    });
    expect(s.pendingApproval?.reason).toMatch(
      /this session would move 16000 in total, 8000 of it in other currencies \(this call 8000 CNY\), above the task's amount_cents of 8000/,
    );
    expect([...(await refundsOf("ord_DEMO00000001")), ...(await refundsOf("ord_DEMO00000010"))]).toEqual([8000]);
    await orch.api.cancelSession({ sessionId: s.sessionId, reason: "test over" });
  });
});

describe("approvals hold the figures they showed", () => {
  it("an approval answered after other sessions moved the customer's total past what it showed is EAPPROVAL, and nothing is refunded", async () => {
    const { orch, chat } = await withModel(
      [() => toolCall("billing_refund", refund("ord_DEMO00000009", 50_000), "r1"), done],
      { APPROVAL_CUSTOMER_AMOUNT_THRESHOLD: "60000" },
    );
    // No amount in the task: a human decides, and is shown the customer's total then (50,000 of 60,000).
    const waitingOne = await start(orch, { kind: "refund", order_id: "ord_DEMO00000009", reason: "DAMAGED" });
    expect(waitingOne.pendingApproval?.reason).toMatch(/the task states no amount_cents/);
    const other = await orch.api.startSession({
      goal: "Refund 120.00 of ord_DEMO00000001",
      task: { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 12_000, reason: "DAMAGED" } as never,
      scopes: ALL_SCOPES,
    });
    expect((await waitForSession(orch.api, other.session!.sessionId)).stopReason).toBe("done");
    const approval = waitingOne.pendingApproval!;
    await orch.approver.resolveApproval(decisionOn(waitingOne.sessionId, approval, true, "checked"));
    const after = await waitForSession(orch.api, waitingOne.sessionId);
    expect(after.stopReason).toBe("done");
    const seen = toolResults(chat.requests.at(-1)!).r1!;
    expect(seen.error?.code).toBe("EAPPROVAL");
    expect(seen.error?.message).toMatch(
      /other sessions moved the totals past what was approved \(now, with this call: .*customer 62000/,
    );
    expect(await refundsOf("ord_DEMO00000009")).toEqual([]);
  });
});

describe("reads limited to what the task names or leads to", () => {
  it("reading an order the task does not name, its refunds, or a customer no answer linked to is EPRECOND; the order's own customer may be read", async () => {
    const { orch, chat } = await withModel([
      () => toolCall("billing_get_order", JSON.stringify({ orderId: "ord_DEMO00000002" }), "g1"),
      () => toolCall("billing_list_refunds", JSON.stringify({ orderId: "ord_DEMO00000005" }), "l1"),
      () => toolCall("risk_get_customer_risk", JSON.stringify({ customerId: "cust_demo_0008" }), "c1"),
      () => toolCall("billing_get_order", JSON.stringify({ orderId: "ord_DEMO00000001" }), "g2"),
      () => toolCall("risk_get_customer_risk", JSON.stringify({ customerId: "cust_demo_0001" }), "c2"),
      done,
    ]);
    const s = await start(orch, { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 100 });
    expect(s.stopReason).toBe("done");
    const seen = toolResults(chat.requests.at(-1)!) as Record<
      string,
      { ok: boolean; error?: { code: string; message: string } }
    >;
    expect(seen.g1?.error?.message).toMatch(
      /billing_get_order reads order ord_DEMO00000002, which the task does not name \(it names ord_DEMO00000001\)/,
    );
    expect(seen.l1?.error?.code).toBe("EPRECOND");
    expect(seen.c1?.error?.message).toMatch(
      /reads customer cust_demo_0008, which the task does not name and no answer so far links to/,
    );
    expect(seen.g2?.ok).toBe(true);
    expect(seen.c2?.ok).toBe(true);
  });
});

describe("the ledger holds the host's bound too", () => {
  it("a refund decided on a read the world moved past is refused by billing (BOUND_EXCEEDED), then decided again and sent to a human", async () => {
    const orch = await orchestrator();
    const admin = createRawClient(ToolAdminService, tools().billing.address, {
      token: await testToken({ subject: "drill", scopes: ["tool:admin"], audience: "billing" }),
    });
    onCleanUp(async () => admin.close());
    await admin.setFaults({ profile: { addedLatencyMs: 1200, methods: ["Refund"] } });
    const { session } = await orch.api.startSession({
      goal: "Refund 450.00 of ord_DEMO00000002",
      task: { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 45_000, reason: "DAMAGED" } as never,
      scopes: ALL_SCOPES,
    });
    const id = session!.sessionId;
    const store = orch.orchestrator.store;
    const deadline = Date.now() + 15_000;
    while (!(await store.auditTrail(id)).some((a) => a.to === "TOOL_EXECUTING" && a.tool === "billing_refund")) {
      if (Date.now() > deadline) throw new Error("the refund was never called");
      await sleep(10);
    }
    // Another writer of the ledger (a refund made elsewhere) while the session's refund is on its way.
    refundElsewhere(tools(), "ord_DEMO00000002", 45_000);
    const s = await waitForSession(orch.api, id, waiting);
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(
      /order ord_DEMO00000002 would have 90000 USD moved in total \(45000 already, across all sessions\)/,
    );
    expect((await store.auditTrail(id)).some((a) => a.outcome === "BOUND_EXCEEDED")).toBe(true);
    expect(await refundsOf("ord_DEMO00000002")).toEqual([45_000]);
    expect(await store.reservations(id)).toEqual([expect.objectContaining({ status: "released", amount: 45_000 })]);
  });
});
