// A dry run decides as the live run would: the same model replies and the same task, dry_run on
// and off, meet the same approvals. The run's own earlier refunds moved nothing and reach no total,
// yet its later calls are judged as if they had (the patrol runs dry, and reports what production
// would do).
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { chatCompletion, type ScriptedToolCall } from "./fake-chat-server.js";
import { ALL_SCOPES, waitForSession } from "./harness.js";
import { moneyFixture, waiting } from "./money-fixture.js";

const { withModel, amountsOf } = moneyFixture();
const ORDER = "ord_DEMO00000001";
const refund = (id: string, amountCents: number): ScriptedToolCall => ({
  id,
  name: "billing_refund",
  arguments: JSON.stringify({ orderId: ORDER, amountCents, reason: "REFUND_REASON_DAMAGED" }),
});
const sure = '{"confidence":0.95,"uncertainty_reason":""}';

async function run(dry: boolean, amountCents: number, replies: ScriptedToolCall[][], env: Record<string, string>) {
  const { orch } = await withModel(
    [
      ...replies.map((toolCalls) => () => chatCompletion({ content: sure, toolCalls })),
      () => chatCompletion({ content: '{"answer":"Refunded.","confidence":0.9,"uncertainty_reason":""}' }),
    ],
    env,
  );
  const { session } = await orch.api.startSession({
    goal: "Refund the order in parts",
    task: { kind: "refund", order_id: ORDER, amount_cents: amountCents, reason: "DAMAGED", dry_run: dry } as never,
    scopes: ALL_SCOPES,
    policy: "openai",
  });
  return waitForSession(orch.api, session!.sessionId, waiting);
}

describe("a dry run's later calls", () => {
  it("meet the order's approval threshold as the live run's do, after its own earlier refund", async () => {
    const env = { APPROVAL_AMOUNT_THRESHOLD_CENTS: "800" };
    const replies = [[refund("a", 500)], [refund("b", 400)]];
    for (const dry of [true, false]) {
      const s = await run(dry, 900, replies, env);
      expect([dry, SessionState[s.state]]).toEqual([dry, "AWAITING_APPROVAL"]);
      expect(s.pendingApproval?.reason).toMatch(/would have 900 USD moved in total \(500 already/);
    }
    // Only the live run's first refund reached the ledger (the dry run went first, on the same order).
    expect(await amountsOf(ORDER)).toEqual([500]);
  });

  it("meet the task's amount as the live run's do, two refunds in one reply", async () => {
    const replies = [[refund("a", 500), refund("b", 499)]];
    for (const dry of [true, false]) {
      const s = await run(dry, 500, replies, {});
      expect([dry, SessionState[s.state]]).toEqual([dry, "AWAITING_APPROVAL"]);
      expect(s.pendingApproval?.reason).toMatch(
        /this session would move 999 USD in total.*above the task's amount_cents of 500/,
      );
    }
  });
});
