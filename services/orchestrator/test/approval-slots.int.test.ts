// Sessions waiting for a human hold neither one of the replica's active slots nor a lease: real
// tool processes, a real orchestrator API with a small ORCHESTRATOR_MAX_ACTIVE_SESSIONS.
import { setTimeout as sleep } from "node:timers/promises";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { refusal } from "@loopguard/test-kit";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, status } from "@loopguard/tool-sdk";
import { beforeAll, describe, expect, it } from "vitest";
import {
  decisionOn,
  HIGH_RISK_CUSTOMER,
  refundsOf,
  startRefund,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const HIGH_RISK_ORDER = "ord_DEMO00000008";

const suite = useSuite({ orchestrator: false });

const waiting = (s: Session) => s.state === SessionState.AWAITING_APPROVAL;

const startHighRiskRefund = (orch: TestOrchestrator) =>
  startRefund(orch.api, HIGH_RISK_ORDER, 1000, HIGH_RISK_CUSTOMER);

async function refundCount(): Promise<number> {
  return (await refundsOf(suite.tools, HIGH_RISK_ORDER)).length;
}

describe("sessions waiting for approval release their slot and their lease", () => {
  let orch: TestOrchestrator;
  beforeAll(async () => {
    orch = await suite.startOrchestrator({ ORCHESTRATOR_MAX_ACTIVE_SESSIONS: "2", APPROVAL_TTL_MS: "300000" });
  });

  it("more waiting sessions than ORCHESTRATOR_MAX_ACTIVE_SESSIONS do not block new sessions, and an approved one runs to DONE", async () => {
    const ids = [];
    for (let i = 0; i < 4; i += 1) ids.push(await startHighRiskRefund(orch));
    for (const id of ids)
      expect((await waitForSession(orch.api, id, waiting)).pendingApproval?.tool).toBe("billing_refund");
    for (const id of ids)
      expect(await orch.orchestrator.store.get(id)).toMatchObject({
        state: "AWAITING_APPROVAL",
        leaseOwner: null,
        leaseExpiresAt: null,
      });
    for (let i = 0; i < 50 && orch.orchestrator.activeCount() > 0; i += 1) await sleep(20);
    expect(orch.orchestrator.activeCount()).toBe(0);

    // Both slots are free for new work while four sessions wait.
    const questions = await Promise.all(
      ["How long do card refunds take?", "What is the refund policy?", "Which refunds need an approval?"].map((goal) =>
        orch.api.startSession({ goal, scopes: ["kb:read"] }),
      ),
    );
    for (const { session } of questions)
      expect((await waitForSession(orch.api, session!.sessionId)).stopReason).toBe("done");

    const before = await refundCount();
    const shown = (await orch.api.getSession({ sessionId: ids[0]! })).session!.pendingApproval!;
    const approved = await orch.approver.resolveApproval(decisionOn(ids[0]!, shown, true, "checked"));
    expect(approved.session?.state).toBe(SessionState.TOOL_EXECUTING);
    const done = await waitForSession(orch.api, ids[0]!);
    expect(done.stopReason).toBe("done");
    expect(done.answer).toMatch(/rf_[A-Za-z0-9]{16}/);
    expect(await refundCount()).toBe(before + 1);
    for (const id of ids.slice(1))
      expect((await orch.api.getSession({ sessionId: id })).session?.state).toBe(SessionState.AWAITING_APPROVAL);
    for (const id of ids.slice(1)) await orch.api.cancelSession({ sessionId: id, reason: "test over" });
  });
});

describe("an approval never outlives the session's wall clock", () => {
  it("is shown expiring while the call can still be made after it, and ends the session then, unanswered", async () => {
    const orch = await suite.startOrchestrator({ APPROVAL_TTL_MS: "300000", ORCHESTRATOR_APPROVAL_SWEEP_MS: "100" });
    const { session } = await orch.api.startSession({
      goal: `Refund 10.00 of ${HIGH_RISK_ORDER}`,
      task: {
        kind: "refund",
        order_id: HIGH_RISK_ORDER,
        amount_cents: 1000,
        reason: "DAMAGED",
        ...HIGH_RISK_CUSTOMER,
      } as never,
      scopes: ["kb:read", "billing:read", "billing:refund", "risk:read"],
      policy: "scripted",
      budget: { maxWallClockMs: 6000 },
    });
    const id = session!.sessionId;
    const shown = await waitForSession(orch.api, id, waiting);
    // Billing's Refund has a 2 s SLA timeout: the approval ends that long before the wall clock does.
    const deadline = timestampMs(shown.createdAt!) + 6000;
    expect(timestampMs(shown.pendingApproval!.expiresAt!)).toBeLessThanOrEqual(deadline - 2000);
    const ended = await waitForSession(orch.api, id, undefined, 10_000);
    expect([ended.stopReason, ended.answer]).toEqual([
      "approval_denied",
      `approval ${shown.pendingApproval!.approvalId} expired unanswered`,
    ]);
  });
});

describe("approvals left unanswered", () => {
  let orch: TestOrchestrator;
  beforeAll(async () => {
    orch = await suite.startOrchestrator({ APPROVAL_TTL_MS: "1000", ORCHESTRATOR_APPROVAL_SWEEP_MS: "100" });
  });

  it("end FAILED with approval_denied once expired, by the periodic sweep; nothing is refunded and a late answer is refused", async () => {
    const before = await refundCount();
    const id = await startHighRiskRefund(orch);
    const shown = (await waitForSession(orch.api, id, waiting)).pendingApproval!;
    const ended = await waitForSession(orch.api, id, undefined, 10_000);
    expect(SessionState[ended.state]).toBe("FAILED");
    expect(ended.stopReason).toBe("approval_denied");
    expect(ended.answer).toBe(`approval ${shown.approvalId} expired unanswered`);
    expect(await refundCount()).toBe(before);
    // An answer to the approval that expired is told so, the approver's and its creator's alike;
    // for the approver the session no longer waits, so an answer naming anything else finds nothing.
    const late = await refusal(orch.approver.resolveApproval(decisionOn(id, shown, true, "too late")), CallError);
    expect([late.code, late.reason]).toEqual([status.FAILED_PRECONDITION, "APPROVAL_EXPIRED"]);
    const own = await refusal(orch.api.resolveApproval(decisionOn(id, shown, true, "too late")), CallError);
    expect([own.code, own.reason]).toEqual([status.FAILED_PRECONDITION, "APPROVAL_EXPIRED"]);
    const stale = { ...shown, argumentsHash: "0".repeat(64) };
    const guessed = await refusal(orch.approver.resolveApproval(decisionOn(id, stale, true)), CallError);
    expect([guessed.code, guessed.reason]).toEqual([status.NOT_FOUND, "SESSION_NOT_FOUND"]);
  });
});
