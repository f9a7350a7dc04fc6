// A cancel of a refund a human approved that no replica has sent yet: nothing is in flight, so the
// cancel lands at once — CANCELLED, the money hold let go — and the refund is never made, neither
// when a slot frees later nor by a sender that read the approval just before the cancel. On SQLite
// with one replica, and on PostgreSQL with two (approved on one, cancelled on the other).
import { setTimeout as sleep } from "node:timers/promises";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { describe, expect, it } from "vitest";
import type { TransitionInput } from "../src/store/session-store.js";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import {
  decisionOn,
  HIGH_RISK_CUSTOMER,
  isEnded,
  refundsOf,
  startRefund,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const ORDER = "ord_DEMO00000008";
const NOT_MADE = "the approved billing_refund call was not made";

const suite = useSuite({ orchestrator: false });
const postgres = usePostgres("cancel-approved");

/** Something the test lets go of when it is ready. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}

async function until(what: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!what()) {
    if (Date.now() > end) throw new Error("timed out");
    await sleep(10);
  }
}

/** A high-risk refund started on `on`, waiting for its approval: its id and the approval shown. */
async function awaitingApproval(on: TestOrchestrator) {
  const id = await startRefund(on.api, ORDER, 1000, HIGH_RISK_CUSTOMER);
  const shown = await waitForSession(on.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL || isEnded(s));
  expect(SessionState[shown.state]).toBe("AWAITING_APPROVAL");
  await until(() => on.orchestrator.activeCount() === 0);
  return { id, approval: shown.pendingApproval! };
}

/**
 * Replicas `approver` and `canceller` (the same one, or two sharing a store), each with one slot
 * held by a session whose model answer waits: an approved refund is cancelled before any replica
 * has a slot to send it.
 */
async function cancelWhileEverySlotIsBusy(env: Record<string, string>, replicas: 1 | 2) {
  const model = gate();
  const chat = await startFakeChatServer(async () => {
    await model.wait;
    return chatCompletion({ content: "Refunds take 5 to 10 business days." });
  });
  suite.onCleanUp(() => chat.close());
  suite.onCleanUp(model.open);
  const config = {
    ...env,
    ORCHESTRATOR_MAX_ACTIVE_SESSIONS: "1",
    APPROVAL_TTL_MS: "300000",
    OPENAI_BASE_URL: chat.baseUrl,
    OPENAI_MODEL: "fake-model",
  };
  const a = await suite.startOrchestrator({ ...config, ORCHESTRATOR_INSTANCE_ID: "replica-a" });
  const b = replicas === 1 ? a : await suite.startOrchestrator({ ...config, ORCHESTRATOR_INSTANCE_ID: "replica-b" });
  const { id, approval } = await awaitingApproval(a);
  const busy = [];
  for (const on of new Set([a, b])) {
    const { session } = await on.api.startSession({
      goal: "How long do card refunds take?",
      scopes: ["kb:read"],
      policy: "openai",
    });
    busy.push(session!.sessionId);
  }
  await until(() => a.orchestrator.activeCount() === 1 && b.orchestrator.activeCount() === 1);
  const before = (await refundsOf(suite.tools, ORDER)).length;

  const approved = await a.approver.resolveApproval(decisionOn(id, approval, true, "checked"));
  expect(SessionState[approved.session!.state]).toBe("TOOL_EXECUTING");
  const { session: cancelled } = await b.api.cancelSession({ sessionId: id, reason: "customer withdrew" });
  expect([SessionState[cancelled!.state], cancelled!.stopReason]).toEqual(["CANCELLED", "cancelled"]);
  expect(cancelled!.answer).toContain(NOT_MADE);
  expect((await a.orchestrator.store.reservations(id)).map((r) => r.status)).toEqual(["released"]);

  // The slots free: what they take next never sends the cancelled refund.
  model.open();
  for (const busyId of busy) await waitForSession(a.api, busyId);
  await until(() => a.orchestrator.activeCount() === 0 && b.orchestrator.activeCount() === 0);
  await sleep(300);
  expect(SessionState[(await a.api.getSession({ sessionId: id })).session!.state]).toBe("CANCELLED");
  expect((await refundsOf(suite.tools, ORDER)).length).toBe(before);
}

describe("a cancel of an approved refund that no replica has sent yet (every slot busy)", () => {
  it("on SQLite: ends it CANCELLED at once, saying the call was not made, its hold released, and no refund is made later", async () => {
    await cancelWhileEverySlotIsBusy({}, 1);
  });

  describe.skipIf(postgres.skip !== null)("on PostgreSQL", () => {
    it("approved on one replica and cancelled on another: CANCELLED at once, its hold released, and no refund is made later", async () => {
      await cancelWhileEverySlotIsBusy({ ORCHESTRATOR_STORE: await postgres.freshDatabase() }, 2);
    }, 60_000);
  });
});

describe("a cancel that lands between a replica reading the approved refund and recording itself as its sender", () => {
  it("ends it CANCELLED; the sender's move loses, and nothing is sent", async () => {
    const orch = await suite.startOrchestrator({ APPROVAL_TTL_MS: "300000" });
    const { id, approval } = await awaitingApproval(orch);
    const before = (await refundsOf(suite.tools, ORDER)).length;
    // The sender's version-checked move ("sending the approved call") is held until the cancel has landed.
    const store = orch.orchestrator.store;
    const transition = store.transition.bind(store);
    const sender = gate();
    const cancelled = gate();
    Object.assign(store, {
      transition: async (input: TransitionInput) => {
        if (input.id === id && input.audit.reason === "sending the approved call") {
          sender.open();
          await cancelled.wait;
        }
        return transition(input);
      },
    });
    suite.onCleanUp(cancelled.open);

    await orch.approver.resolveApproval(decisionOn(id, approval, true, "checked"));
    await sender.wait;
    const { session } = await orch.api.cancelSession({ sessionId: id, reason: "customer withdrew" });
    expect(SessionState[session!.state]).toBe("CANCELLED");
    expect(session!.answer).toContain(NOT_MADE);
    cancelled.open();
    await until(() => orch.orchestrator.activeCount() === 0);

    const trail = (await store.auditTrail(id)).map((move) => move.reason);
    expect(trail).not.toContain("sending the approved call");
    expect(trail.at(-1)).toMatch(/^cancelled: /);
    expect((await store.reservations(id)).map((r) => r.status)).toEqual(["released"]);
    expect((await refundsOf(suite.tools, ORDER)).length).toBe(before);
  });
});
