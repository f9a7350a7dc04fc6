// The host's rules on money, whatever the policy: cumulative thresholds per order (read live from
// the ledger, across sessions) and per session, the order's own customer's risk read live by the
// host (a model's risk call about anyone counts for nothing), and side effects only on the
// entities the task names. Real tool processes, a real orchestrator, the ledger checked directly.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { chatCompletion, toolCall, toolResults } from "./fake-chat-server.js";
import { ALL_SCOPES, modelSession, waitForSession } from "./harness.js";
import { moneyFixture, waiting } from "./money-fixture.js";

const { tools, orchestrator, withModel, refundsOf } = moneyFixture();
const refundArgs = (orderId: string, amountCents: number, reason = "REFUND_REASON_DAMAGED") =>
  JSON.stringify({ orderId, amountCents, reason });
const call = toolCall;

describe("cumulative amounts", () => {
  it("10 sessions each refunding 45,000 of one order: the one that would take its total above 50,000 waits, and every later one", async () => {
    const orch = await orchestrator();
    const outcomes: string[] = [];
    for (let i = 0; i < 10; i += 1) {
      const { session } = await orch.api.startSession({
        goal: `Refund 450.00 of ord_DEMO00000002 (${i})`,
        task: { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 45_000, reason: "DAMAGED" } as never,
        scopes: ALL_SCOPES,
      });
      const s = await waitForSession(orch.api, session!.sessionId, waiting);
      outcomes.push(SessionState[s.state]);
      if (s.state === SessionState.AWAITING_APPROVAL) {
        expect(s.pendingApproval?.reason).toMatch(
          /order ord_DEMO00000002 would have 90000 USD moved in total \(45000 already, across all sessions\), above the approval threshold of 50000 USD/,
        );
        await orch.api.cancelSession({ sessionId: s.sessionId, reason: "test" });
      }
    }
    expect(outcomes).toEqual(["DONE", ...Array(9).fill("AWAITING_APPROVAL")]);
    expect((await refundsOf("ord_DEMO00000002")).map((r) => Number(r.amountCents))).toEqual([45_000]);
  });

  it("one session refunding 45,000 twice on one order (a model re-planning with another reason): the second waits for approval", async () => {
    const { orch } = await withModel([
      () => call("billing_refund", refundArgs("ord_DEMO00000002", 45_000), "r1"),
      () => call("billing_refund", refundArgs("ord_DEMO00000002", 45_000, "REFUND_REASON_NOT_DELIVERED"), "r2"),
    ]);
    const task = { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 45_000 };
    const s = await modelSession(orch, "Refund twice", task, waiting);
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(/would have 90000 USD moved in total/);
    expect(s.pendingApproval?.reason).toMatch(
      /this session would move 90000 USD in total \(this call 45000\), above the task's amount_cents of 45000/,
    );
    expect((await refundsOf("ord_DEMO00000002")).map((r) => Number(r.amountCents))).toEqual([45_000]);
  });

  it("the same refund asked twice in one session is made once: the second is its replay, with no approval", async () => {
    const { orch, chat } = await withModel([
      () => call("billing_refund", refundArgs("ord_DEMO00000001", 700), "r1"),
      () => call("billing_refund", refundArgs("ord_DEMO00000001", 700), "r2"),
      (req) => {
        const results = toolResults(req) as unknown as Record<
          string,
          { data: { refund: { refundId: string }; replayed?: boolean } }
        >;
        return chatCompletion({
          content: `Refund ${results.r2!.data.refund.refundId} (replayed: ${String(results.r2!.data.replayed ?? false)}).`,
        });
      },
    ]);
    const task = { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 700 };
    const s = await modelSession(orch, "Refund", task);
    expect(s.stopReason).toBe("done");
    const refunds = await refundsOf("ord_DEMO00000001");
    expect(refunds).toHaveLength(1);
    expect(s.answer).toBe(`Refund ${refunds[0]!.refundId} (replayed: true).`);
    expect(chat.requests).toHaveLength(3);
  });

  it("per session: refunds on two orders the task names, each small, together above the session threshold, wait for approval", async () => {
    const { orch } = await withModel(
      [
        () => call("billing_refund", refundArgs("ord_DEMO00000001", 6000), "r1"),
        () => call("billing_refund", refundArgs("ord_DEMO00000002", 6000), "r2"),
      ],
      {
        APPROVAL_SESSION_AMOUNT_THRESHOLD_CENTS: "10000",
      },
    );
    const task = { kind: "refund", order_ids: ["ord_DEMO00000001", "ord_DEMO00000002"], amount_cents: 12_000 };
    const s = await modelSession(orch, "Refund both", task, waiting);
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(
      /this session would move 12000 USD in total, above the per-session approval threshold of 10000 USD/,
    );
    expect(await refundsOf("ord_DEMO00000002")).toHaveLength(0);
  });
});

describe("the order's own customer's risk, read by the host", () => {
  it("a refund of a high-risk customer's order with no risk call waits for approval, and nothing is refunded", async () => {
    const { orch } = await withModel([() => call("billing_refund", refundArgs("ord_DEMO00000008", 1000), "r1")]);
    const s = await modelSession(orch, "Refund", { kind: "refund", order_id: "ord_DEMO00000008" }, waiting);
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(/customer risk score 92 is at or above 70/);
    expect(await refundsOf("ord_DEMO00000008")).toHaveLength(0);
  });

  it("a risk call about another (low-risk) identity counts for nothing: still approval, nothing refunded", async () => {
    const { orch } = await withModel([
      () => call("risk_query_risk", JSON.stringify({ idCard: "110101198003121232", phone: "+8613800138000" }), "q1"),
      () => call("billing_refund", refundArgs("ord_DEMO00000008", 1000), "r1"),
    ]);
    const task = {
      kind: "refund",
      order_id: "ord_DEMO00000008",
      id_card: "110101198003121232",
      phone: "+8613800138000",
    };
    const s = await modelSession(orch, "Refund", task, waiting);
    expect(SessionState[s.state]).toBe("AWAITING_APPROVAL");
    expect(s.pendingApproval?.reason).toMatch(/risk score 92/);
    expect(await refundsOf("ord_DEMO00000008")).toHaveLength(0);
  });

  it("when the customer's risk cannot be read (risk down), the session waits for risk (PARKED) instead of passing, and refunds nothing", async () => {
    await tools().risk.child.kill("SIGKILL");
    await tools().risk.exited;
    const orch = await orchestrator();
    const { session } = await orch.api.startSession({
      goal: "Refund 1.00 of ord_DEMO00000001",
      task: { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 100, reason: "DAMAGED" } as never,
      scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
    });
    const s = await waitForSession(orch.api, session!.sessionId, (x) => x.state === SessionState.PARKED || waiting(x));
    expect(SessionState[s.state]).toBe("PARKED");
    expect(s.parked).toMatchObject({ tool: "risk", reason: expect.stringMatching(/UNAVAILABLE/) });
    expect(await refundsOf("ord_DEMO00000001")).toHaveLength(0);
  });
});

describe("only the entities the task names", () => {
  it("a refund of an order outside the task is an EPRECOND observation, and the ledger is untouched", async () => {
    const { orch, chat } = await withModel([
      () => call("billing_refund", refundArgs("ord_DEMO00000007", 100), "r1"),
      () => chatCompletion({ content: "I may only refund the order of this task." }),
    ]);
    const s = await modelSession(orch, "Refund", { kind: "refund", order_id: "ord_DEMO00000001" });
    expect(s.stopReason).toBe("done");
    const seen = toolResults(chat.requests.at(-1)!).r1!;
    expect(seen.error?.code).toBe("EPRECOND");
    expect(seen.error?.message).toMatch(
      /order ord_DEMO00000007, which the task does not name \(it names ord_DEMO00000001\)/,
    );
    expect(await refundsOf("ord_DEMO00000007")).toHaveLength(0);
  });
});
