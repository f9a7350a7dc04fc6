// A refund a human approved that no replica has sent yet (every slot busy). A cancel: nothing is in
// flight, so the cancel lands at once — CANCELLED, the money hold let go — and the refund is never
// made, neither when a slot frees later nor by a sender that read the approval just before the
// cancel; on SQLite with one replica, and on PostgreSQL with two (approved on one, cancelled on the
// other). A slot that frees after the session's wall clock ran out, or after the order changed
// since the approval, sends nothing either.
import { setTimeout as sleep } from "node:timers/promises";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { describe, expect, it } from "vitest";
import type { TransitionInput } from "../src/store/session-store.js";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import {
  ALL_SCOPES,
  decisionOn,
  HIGH_RISK_CUSTOMER,
  isEnded,
  refundElsewhere,
  refundsOf,
  setFaults,
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
 * The config of replicas with one slot each, and a model whose answers wait until `model.open()`:
 * a question on the openai policy holds a replica's slot until then.
 */
async function oneSlotEach(env: Record<string, string>) {
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
  return { model, config };
}

/** The slot of each replica taken by a question whose model answer waits; their ids. */
async function takeEverySlot(replicas: ReadonlySet<TestOrchestrator>): Promise<string[]> {
  const busy = [];
  for (const on of replicas) {
    const { session } = await on.api.startSession({
      goal: "How long do card refunds take?",
      scopes: ["kb:read"],
      policy: "openai",
    });
    busy.push(session!.sessionId);
  }
  await until(() => [...replicas].every((on) => on.orchestrator.activeCount() === 1));
  return busy;
}

/**
 * Replicas `approver` and `canceller` (the same one, or two sharing a store), each with one slot
 * held by a session whose model answer waits: an approved refund is cancelled before any replica
 * has a slot to send it.
 */
async function cancelWhileEverySlotIsBusy(env: Record<string, string>, replicas: 1 | 2) {
  const { model, config } = await oneSlotEach(env);
  const a = await suite.startOrchestrator({ ...config, ORCHESTRATOR_INSTANCE_ID: "replica-a" });
  const b = replicas === 1 ? a : await suite.startOrchestrator({ ...config, ORCHESTRATOR_INSTANCE_ID: "replica-b" });
  const { id, approval } = await awaitingApproval(a);
  const busy = await takeEverySlot(new Set([a, b]));
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

describe("an approved refund whose order cannot be read again when a run comes to send it", () => {
  it("parks with its approval and hold kept, and is made once when billing is back, with no second approval", async () => {
    const orch = await suite.startOrchestrator({ APPROVAL_TTL_MS: "300000" });
    const { id, approval } = await awaitingApproval(orch);
    const before = (await refundsOf(suite.tools, ORDER)).length;
    await setFaults(suite.tools, "billing", { outage: true, methods: ["GetOrder"] });
    try {
      await orch.approver.resolveApproval(decisionOn(id, approval, true, "checked"));
      const waiting = await waitForSession(orch.api, id, (s) => s.state === SessionState.PARKED || isEnded(s));
      expect(SessionState[waiting.state]).toBe("PARKED");
      expect(waiting.parked).toMatchObject({
        tool: "billing",
        reason: expect.stringMatching(/^live read failed: UNAVAILABLE/),
      });
      expect((await orch.orchestrator.store.reservations(id)).map((r) => r.status)).toEqual(["held"]);
      expect((await refundsOf(suite.tools, ORDER)).length).toBe(before);
    } finally {
      await setFaults(suite.tools, "billing", {});
    }
    const done = await waitForSession(orch.api, id, undefined, 30_000);
    expect([SessionState[done.state], done.outcome?.kind]).toEqual(["DONE", "succeeded"]);
    const trail = (await orch.orchestrator.store.auditTrail(id)).map((move) => move.reason);
    expect(trail.filter((reason) => reason?.startsWith("approval needed"))).toHaveLength(1);
    expect(trail).toContain("sending the approved call");
    const made = (await refundsOf(suite.tools, ORDER)).slice(before);
    expect(made.map((r) => r.amountCents)).toEqual([1000n]);
  }, 60_000);
});

describe("an approved refund that waits for a slot", () => {
  /**
   * A high-risk refund with `wallClockMs` of wall clock, approved while the replica's one slot is
   * busy; `meanwhile` runs before the slot frees. What the session ended with, and refunds made.
   */
  async function approvedThenSlotFrees(wallClockMs: number, meanwhile: (startedAt: number) => Promise<void>) {
    const { model, config } = await oneSlotEach({});
    const orch = await suite.startOrchestrator(config);
    const startedAt = Date.now();
    const { session } = await orch.api.startSession({
      goal: "Refund 10.00 of ord_DEMO00000008",
      task: { kind: "refund", order_id: ORDER, amount_cents: 1000, reason: "DAMAGED", ...HIGH_RISK_CUSTOMER } as never,
      scopes: ALL_SCOPES,
      policy: "scripted",
      budget: { maxWallClockMs: wallClockMs },
    });
    const id = session!.sessionId;
    const shown = await waitForSession(orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL || isEnded(s));
    expect(SessionState[shown.state]).toBe("AWAITING_APPROVAL");
    await until(() => orch.orchestrator.activeCount() === 0);
    const [busy] = await takeEverySlot(new Set([orch]));
    const before = (await refundsOf(suite.tools, ORDER)).length;
    const approved = await orch.approver.resolveApproval(decisionOn(id, shown.pendingApproval!, true, "checked"));
    expect(SessionState[approved.session!.state]).toBe("TOOL_EXECUTING");
    await meanwhile(startedAt);
    model.open();
    await waitForSession(orch.api, busy!);
    const ended = await waitForSession(orch.api, id, (s) => isEnded(s) || s.state === SessionState.AWAITING_APPROVAL);
    const trail = (await orch.orchestrator.store.auditTrail(id)).map((move) => move.reason);
    const held = (await orch.orchestrator.store.reservations(id)).map((r) => r.status);
    return { ended, trail, held, made: (await refundsOf(suite.tools, ORDER)).length - before };
  }

  it("past the session's wall clock: not sent, the session stops deadline saying so, its hold released", async () => {
    const WALL_CLOCK_MS = 6000;
    const { ended, trail, held, made } = await approvedThenSlotFrees(WALL_CLOCK_MS, (startedAt) =>
      sleep(Math.max(0, startedAt + WALL_CLOCK_MS + 500 - Date.now())),
    );
    expect([SessionState[ended.state], ended.stopReason]).toEqual(["FAILED", "deadline"]);
    expect(ended.answer).toMatch(
      /^the approved billing_refund call was not made: \d+ ms of the session's wall clock left when a run could send it, less than its \d+ ms SLA timeout/,
    );
    expect(trail).not.toContain("sending the approved call");
    expect(held).toEqual(["released"]);
    expect(made).toBe(0);
  });

  it("after the order changed since the approval: not sent, the policy hears EAPPROVAL, the hold released", async () => {
    const { ended, trail, held, made } = await approvedThenSlotFrees(60_000, async () => {
      refundElsewhere(suite.tools, ORDER, 2000);
    });
    expect(trail).toContain("approved by test-approver, but the approval no longer matches the world");
    expect(trail).not.toContain("sending the approved call");
    expect(held[0]).toBe("released");
    // The refund made elsewhere is the only one; the policy was told why its refund was not made.
    expect(made).toBe(1);
    expect(ended.answer).toMatch(/EAPPROVAL: the world changed since the approval was asked/);
  });
});
