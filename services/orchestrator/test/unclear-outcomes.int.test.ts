// A refund whose outcome the orchestrator could not see — its answer lost, the orchestrator
// stopped or killed while it was in flight — is never reported as failed and never made twice:
// the host sends it again with the same idempotency key (the ledger replays it) before the policy
// hears anything, or a human decides. Real processes, real signals, the ledger checked directly;
// billing is slowed with fault injection that holds its answer after the refund was made.
import { join } from "node:path";
import Database from "better-sqlite3";
import { setTimeout as sleep } from "node:timers/promises";
import { kill, type ServiceProcess } from "@loopguard/test-kit";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { SESSION_OPERATOR_SCOPES } from "@loopguard/tool-sdk/testing";
import { afterEach, describe, expect, it } from "vitest";
import { openSessionStore } from "../src/store/open-store.js";
import { chatCompletion, type ScriptedReply, startFakeChatServer } from "./fake-chat-server.js";
import { decisionOn, isEnded, refundsOf, setFaults, type Tools, waitForSession } from "./harness.js";
import { processFixture } from "./process-fixture.js";

const SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"];
const REFUND_ID = /rf_[A-Za-z0-9]{16}/;
const { tempDir, clientFor, startTools, startOrchestrator, cleanUp, onCleanUp } = processFixture("outcome");
afterEach(cleanUp);

/** Holds billing's Refund answers `ms` after the refund is made (0 turns it off). */
function holdRefundAnswers(tools: Tools, ms: number): Promise<void> {
  return setFaults(tools, "billing", { responseDelayMs: ms, methods: ["Refund"] });
}

/** Polls until the ledger has `count` refunds of the order: the refund was made, its answer may still be on its way. */
async function untilRefunded(tools: Tools, orderId: string, count = 1): Promise<void> {
  const until = Date.now() + 15_000;
  while ((await refundsOf(tools, orderId)).length < count) {
    if (Date.now() > until) throw new Error(`no refund of ${orderId} was made`);
    await sleep(20);
  }
}

/** A model that refunds the task's order, re-plans the refund (same arguments) whenever it hears it failed, and answers citing the refund id. */
function replanningModel(orderId: string, amountCents: number): ScriptedReply[] {
  let calls = 0;
  const reply: ScriptedReply = (request) => {
    const results = (request.body.messages as { role: string; content: string }[])
      .filter((m) => m.role === "tool")
      .map((m) => JSON.parse(m.content) as { ok: boolean; data?: { refund?: { refundId: string } } });
    const last = results.at(-1);
    if (last?.ok && last.data?.refund)
      return chatCompletion({
        content: `Refunded ${amountCents} cents of ${orderId}: refund ${last.data.refund.refundId}.`,
      });
    calls += 1;
    return chatCompletion({
      toolCalls: [
        {
          id: `refund_${calls}`,
          name: "billing_refund",
          arguments: JSON.stringify({ orderId, amountCents, reason: "REFUND_REASON_DAMAGED" }),
        },
      ],
    });
  };
  return Array.from({ length: 20 }, () => reply);
}

interface Run {
  readonly tools: Tools;
  readonly env: Record<string, string>;
  orchestrator: ServiceProcess;
  api(): Promise<Awaited<ReturnType<typeof clientFor<typeof OrchestratorService>>>>;
  approver(): Promise<Awaited<ReturnType<typeof clientFor<typeof OrchestratorService>>>>;
  restart(): Promise<void>;
}

/** Tools and an orchestrator process on a store that outlives it, so a restarted one resumes its sessions. */
async function setUp(
  policy: "scripted" | "openai",
  model: ScriptedReply[] = [],
  settings: Record<string, string> = {},
  toolSettings: Record<string, string> = {},
): Promise<Run> {
  const tools = await startTools(0, toolSettings);
  const env: Record<string, string> = {
    ORCHESTRATOR_STORE: `sqlite:${join(tempDir("store"), "orchestrator.db")}`,
    LOOPGUARD_DATA_DIR: tempDir("orchestrator"),
    ...settings,
  };
  if (policy === "openai") {
    const chat = await startFakeChatServer(model);
    onCleanUp(() => chat.close());
    Object.assign(env, { OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" });
  }
  const run: Run = {
    tools,
    env,
    orchestrator: await startOrchestrator(tools, env),
    api: () =>
      clientFor(OrchestratorService, run.orchestrator.address, SESSION_OPERATOR_SCOPES, { subject: "operator" }),
    approver: () =>
      clientFor(OrchestratorService, run.orchestrator.address, ["sessions:read", "approvals:write"], {
        subject: "second-operator",
      }),
    async restart() {
      run.orchestrator = await startOrchestrator(tools, env);
    },
  };
  return run;
}

async function startRefund(
  run: Run,
  policy: "scripted" | "openai",
  orderId: string,
  amountCents: number,
  maxWallClockMs = 0,
): Promise<string> {
  const api = await run.api();
  const { session } = await api.startSession({
    goal: `Refund ${amountCents} cents of ${orderId}`,
    task: { kind: "refund", order_id: orderId, amount_cents: amountCents, reason: "DAMAGED" } as never,
    scopes: SCOPES,
    policy,
    budget: { maxWallClockMs },
  });
  return session!.sessionId;
}

/** Exactly one refund in the ledger, and the session's answer cites it without calling anything failed. */
async function expectRefundedOnce(run: Run, orderId: string, done: Session): Promise<void> {
  expect(SessionState[done.state]).toBe("DONE");
  const refunds = await refundsOf(run.tools, orderId);
  expect(refunds).toHaveLength(1);
  expect(REFUND_ID.exec(done.answer)?.[0]).toBe(refunds[0]!.refundId);
  expect(done.answer).not.toMatch(/fail/i);
}

describe("a refund whose answer is lost", () => {
  it("is sent again with the same key until its outcome is known: one refund, the answer cites it, the policy never hears it failed", async () => {
    const run = await setUp("scripted");
    await holdRefundAnswers(run.tools, 2500);
    const id = await startRefund(run, "scripted", "ord_DEMO00000001", 300);
    await untilRefunded(run.tools, "ord_DEMO00000001");
    await holdRefundAnswers(run.tools, 0);
    const done = await waitForSession(await run.api(), id, isEnded, 30_000);
    await expectRefundedOnce(run, "ord_DEMO00000001", done);
    const trace = (await (await run.api()).getTrace({ sessionId: id })).records.map(
      (r) => JSON.parse(r) as { decision: { name?: string }; result: { ok?: boolean } | null },
    );
    const refundObservations = trace.filter((r) => r.decision.name === "billing_refund" && r.result);
    expect(refundObservations.map((r) => r.result!.ok)).toEqual([true]);
    // Each re-send is an attempt beyond the first: counted in the retry budget.
    const { transitions } = await (await run.api()).getSessionDetail({ sessionId: id });
    const resends = transitions.filter((t) => /^re-sending billing_refund \(round \d+\)/.test(t.reason ?? "")).length;
    expect(resends).toBeGreaterThan(0);
    expect(done.usage?.retries).toBeGreaterThanOrEqual(resends);
  }, 60_000);

  it("that stays unknown (parked and re-sent while the wall clock lasts) goes to a human, and approving sends the same key again: still one refund", async () => {
    const run = await setUp("scripted");
    await holdRefundAnswers(run.tools, 2500);
    const id = await startRefund(run, "scripted", "ord_DEMO00000001", 400, 16_000);
    const waiting = await waitForSession(
      await run.api(),
      id,
      (s) => s.state === SessionState.AWAITING_APPROVAL || isEnded(s),
      40_000,
    );
    expect(SessionState[waiting.state]).toBe("AWAITING_APPROVAL");
    expect(waiting.pendingApproval?.reason).toMatch(
      /the outcome of an earlier attempt is unknown; approving re-sends it with the same idempotency key/,
    );
    expect(await refundsOf(run.tools, "ord_DEMO00000001")).toHaveLength(1);
    await holdRefundAnswers(run.tools, 0);
    const shown = waiting.pendingApproval!;
    await (await run.approver()).resolveApproval(decisionOn(id, shown, true, "re-send it"));
    // The wall clock was spent waiting: the session ends on it right after the re-send, saying what
    // was done. On a loaded machine the re-send can leave some of it (the run gave up waiting with up
    // to the refund's SLA timeout left): then the policy answers as usual, citing the refund.
    const ended = await waitForSession(await run.api(), id, isEnded, 20_000);
    expect(ended.outcome?.kind).toBe("succeeded");
    const refunds = await refundsOf(run.tools, "ord_DEMO00000001");
    expect(refunds).toHaveLength(1);
    if (ended.stopReason === "deadline")
      expect(ended.answer).toMatch(new RegExp(`already done: billing_refund .*refund:${refunds[0]!.refundId}`));
    else {
      expect(ended.stopReason).toBe("done");
      expect(REFUND_ID.exec(ended.answer)?.[0]).toBe(refunds[0]!.refundId);
    }
    // The approved re-send is a retry of the call counted before, not another tool call.
    expect(ended.usage!.toolCalls).toBe(waiting.usage!.toolCalls);
    expect(ended.usage!.retries).toBeGreaterThan(waiting.usage!.retries);
  }, 60_000);
});

describe("a refund whose re-sends find billing's ledger locked", () => {
  it("is not taken as not made: its hold stays held and a human decides, the refund made once; denied, it ends effect_unknown", async () => {
    // A short lock wait: each re-send is refused LEDGER_UNAVAILABLE (then BREAKER_OPEN) within Refund's deadline.
    const run = await setUp("scripted", [], {}, { BILLING_LOCK_TIMEOUT_MS: "150" });
    await holdRefundAnswers(run.tools, 2500);
    const id = await startRefund(run, "scripted", "ord_DEMO00000001", 400, 16_000);
    await untilRefunded(run.tools, "ord_DEMO00000001");
    // The ledger is locked before the same-key re-sends arrive: neither billing's own transient
    // refusal nor the breaker it opens says whether the first attempt committed (it did).
    const holder = new Database(join(run.tools.dataDir, "billing.db"));
    let settled: Session;
    try {
      holder.exec("BEGIN IMMEDIATE");
      await holdRefundAnswers(run.tools, 0);
      settled = await waitForSession(
        await run.api(),
        id,
        (s) => s.state === SessionState.AWAITING_APPROVAL || isEnded(s),
        40_000,
      );
      expect(SessionState[settled.state]).toBe("AWAITING_APPROVAL");
      expect(settled.pendingApproval?.reason).toMatch(/the outcome of an earlier attempt is unknown/);
    } finally {
      holder.exec("ROLLBACK");
      holder.close();
    }
    expect(await refundsOf(run.tools, "ord_DEMO00000001")).toHaveLength(1);
    // A person who would rather check billing's records first denies the re-send: the session says
    // its refund may have been made (the outcome's reason, which the metrics and alerts count).
    await (await run.approver()).resolveApproval(decisionOn(id, settled.pendingApproval!, false, "checking by hand"));
    const denied = await waitForSession(await run.api(), id, isEnded, 10_000);
    expect([denied.stopReason, denied.outcome?.kind, denied.outcome?.reason]).toEqual([
      "approval_denied",
      "not_done",
      "effect_unknown: billing_refund",
    ]);
    const store = await openSessionStore(run.env.ORCHESTRATOR_STORE!);
    try {
      expect((await store.reservations(id)).map((r) => r.status)).toEqual(["held"]);
    } finally {
      await store.close();
    }
  }, 60_000);
});

describe("the orchestrator stopped while a refund is in flight", () => {
  it.each([
    ["SIGTERM", "scripted"],
    ["SIGKILL", "scripted"],
    ["SIGTERM", "openai"],
    ["SIGKILL", "openai"],
  ] as const)(
    "%s with the %s policy: one refund, the answer cites it, never 'failed'",
    async (signal, policy) => {
      const run = await setUp(policy, replanningModel("ord_DEMO00000001", 500));
      await holdRefundAnswers(run.tools, 1500);
      const id = await startRefund(run, policy, "ord_DEMO00000001", 500);
      await untilRefunded(run.tools, "ord_DEMO00000001");
      const exit = await kill(run.orchestrator, signal);
      // SIGTERM drains: the refund in flight is finished and recorded before the process exits 0.
      if (signal === "SIGTERM") expect(exit).toBe(0);
      await holdRefundAnswers(run.tools, 0);
      await run.restart();
      await expectRefundedOnce(run, "ord_DEMO00000001", await waitForSession(await run.api(), id, isEnded, 30_000));
    },
    60_000,
  );

  it("SIGKILL during a refund a human approved: the next owner sends it with the same key, no stale-approval refusal, one refund", async () => {
    const run = await setUp("scripted");
    const id = await startRefund(run, "scripted", "ord_DEMO00000008", 1000);
    const shown = (await waitForSession(await run.api(), id, (s) => s.state === SessionState.AWAITING_APPROVAL, 20_000))
      .pendingApproval!;
    await holdRefundAnswers(run.tools, 1500);
    await (await run.approver()).resolveApproval(decisionOn(id, shown, true, "checked"));
    await untilRefunded(run.tools, "ord_DEMO00000008");
    await kill(run.orchestrator, "SIGKILL");
    await holdRefundAnswers(run.tools, 0);
    await run.restart();
    const done = await waitForSession(await run.api(), id, isEnded, 30_000);
    await expectRefundedOnce(run, "ord_DEMO00000008", done);
    expect(done.answer).not.toMatch(/EAPPROVAL|approval/);
  }, 60_000);

  it("SIGKILL after an approved refund was made, billing then refusing: never 'not made', the hold kept, a human settles it with the same key", async () => {
    const run = await setUp("scripted");
    const id = await startRefund(run, "scripted", "ord_DEMO00000008", 1000, 15_000);
    const shown = (await waitForSession(await run.api(), id, (s) => s.state === SessionState.AWAITING_APPROVAL, 20_000))
      .pendingApproval!;
    await holdRefundAnswers(run.tools, 3000);
    await (await run.approver()).resolveApproval(decisionOn(id, shown, true, "checked"));
    await untilRefunded(run.tools, "ord_DEMO00000008");
    await kill(run.orchestrator, "SIGKILL");
    // Billing now refuses every Refund before its handler runs (a shed, a drain, an outage).
    await setFaults(run.tools, "billing", { outage: true, methods: ["Refund"] });
    await run.restart();
    const waiting = await waitForSession(
      await run.api(),
      id,
      (s) =>
        (s.state === SessionState.AWAITING_APPROVAL && s.pendingApproval?.approvalId !== shown.approvalId) ||
        isEnded(s),
      40_000,
    );
    expect(SessionState[waiting.state]).toBe("AWAITING_APPROVAL");
    expect(waiting.pendingApproval?.reason).toMatch(/the outcome of an earlier attempt is unknown/);
    const store = await openSessionStore(run.env.ORCHESTRATOR_STORE!);
    onCleanUp(() => store.close());
    expect((await store.reservations(id)).map((r) => r.status)).toEqual(["held"]);
    await setFaults(run.tools, "billing", {});
    await (await run.approver()).resolveApproval(decisionOn(id, waiting.pendingApproval!, true, "re-send it"));
    const ended = await waitForSession(await run.api(), id, isEnded, 20_000);
    const refunds = await refundsOf(run.tools, "ord_DEMO00000008");
    expect(refunds).toHaveLength(1);
    expect(ended.answer).not.toMatch(/not made|nothing was done/);
    expect(ended.answer).toContain(`refund:${refunds[0]!.refundId}`);
  }, 90_000);

  it("SIGKILL during a refund, past ORCHESTRATOR_MAX_TAKEOVERS: the refund is settled with its key first, then the session stops naming it", async () => {
    const run = await setUp("scripted", [], { ORCHESTRATOR_LEASE_TTL_MS: "1000", ORCHESTRATOR_MAX_TAKEOVERS: "1" });
    await holdRefundAnswers(run.tools, 1500);
    const id = await startRefund(run, "scripted", "ord_DEMO00000001", 500);
    await untilRefunded(run.tools, "ord_DEMO00000001");
    await kill(run.orchestrator, "SIGKILL");
    await run.restart();
    await waitForSession(await run.api(), id, (s) => s.usage?.takeovers === 1, 20_000);
    await kill(run.orchestrator, "SIGKILL");
    await holdRefundAnswers(run.tools, 0);
    await run.restart();
    const done = await waitForSession(await run.api(), id, isEnded, 30_000);
    const refunds = await refundsOf(run.tools, "ord_DEMO00000001");
    expect(refunds).toHaveLength(1);
    expect(done).toMatchObject({ stopReason: "unrecoverable_error", usage: { takeovers: 2 } });
    expect(done.answer).toMatch(/^stopped after 2 takeovers/);
    expect(done.answer).toContain(`already done: billing_refund refund:${refunds[0]!.refundId}`);
  }, 60_000);

  it("a cancel while the refund is in flight waits for it and records what really happened", async () => {
    const run = await setUp("scripted");
    await holdRefundAnswers(run.tools, 1500);
    const id = await startRefund(run, "scripted", "ord_DEMO00000001", 600);
    await untilRefunded(run.tools, "ord_DEMO00000001");
    const { session } = await (await run.api()).cancelSession({ sessionId: id, reason: "customer called back" });
    expect(SessionState[session!.state]).toBe("CANCELLED");
    const [refund] = await refundsOf(run.tools, "ord_DEMO00000001");
    expect(session!.answer).toContain(`already done before the cancel: billing_refund refund:${refund!.refundId}`);
  }, 60_000);
});

/** `reply`, and a promise that settles once the model server has received the request it answers. */
function whenAsked(reply: ScriptedReply): { reply: ScriptedReply; asked: Promise<void> } {
  let arrived!: () => void;
  const asked = new Promise<void>((resolve) => {
    arrived = resolve;
  });
  return {
    reply: (request) => {
      arrived();
      return reply(request);
    },
    asked,
  };
}

describe("the orchestrator stopped while the model decides", () => {
  it("SIGTERM mid-decision: the stop's cancel is no failure of the model; the next owner asks it again and the refund is made once", async () => {
    const [first, ...rest] = replanningModel("ord_DEMO00000001", 500);
    const slow = whenAsked(async (request) => {
      await sleep(3000);
      return first!(request);
    });
    let answered = 0;
    const counted = rest.map(
      (reply): ScriptedReply =>
        (request) => {
          answered += 1;
          return reply(request);
        },
    );
    const run = await setUp("openai", [slow.reply, ...counted]);
    const id = await startRefund(run, "openai", "ord_DEMO00000001", 500);
    await slow.asked;
    expect(await kill(run.orchestrator, "SIGTERM")).toBe(0);
    await run.restart();
    const done = await waitForSession(await run.api(), id, isEnded, 30_000);
    await expectRefundedOnce(run, "ord_DEMO00000001", done);
    // The cut-off call is charged: its prompt's tokens beside what each answered call reported
    // (1,000 + 40), and a retry with its audit row. On a loaded machine a stall past the lease may cut
    // off one more (the renewal aborts the run, and its own claim takes the session back), and
    // hedged reads add retries. The session was handed back, not taken over.
    expect(Number(done.usage!.tokens)).toBeGreaterThan(1040 * answered);
    expect(done.usage?.retries).toBeGreaterThanOrEqual(1);
    expect(done.usage?.takeovers).toBe(0);
    const store = await openSessionStore(run.env.ORCHESTRATOR_STORE!);
    try {
      const cutOff = (await store.auditTrail(id)).filter((r) => r.reason?.startsWith("model call cut off by a stop"));
      expect(cutOff.length).toBeGreaterThanOrEqual(1);
    } finally {
      await store.close();
    }
  }, 60_000);

  it("SIGKILL mid-decision, again and again, restarted under one instance id: the session is taken over at most ORCHESTRATOR_MAX_TAKEOVERS times, then stopped without asking the model again", async () => {
    let asked = 0;
    const hangs: ScriptedReply = async (request) => {
      asked += 1;
      await sleep(20_000);
      return replanningModel("ord_DEMO00000002", 400)[0]!(request);
    };
    const run = await setUp(
      "openai",
      Array.from({ length: 5 }, () => hangs),
      {
        ORCHESTRATOR_LEASE_TTL_MS: "1000",
        ORCHESTRATOR_MAX_TAKEOVERS: "1",
        // As a container restarted in its pod comes back: the same name (its pod's; its pid 1).
        ORCHESTRATOR_INSTANCE_ID: "orchestrator-0",
      },
    );
    const id = await startRefund(run, "openai", "ord_DEMO00000002", 400);
    await until(() => asked >= 1, 20_000, "the model asked");
    await kill(run.orchestrator, "SIGKILL");
    await run.restart();
    await until(() => asked >= 2, 20_000, "the model asked again");
    await kill(run.orchestrator, "SIGKILL");
    const askedBefore = asked;
    await run.restart();
    const done = await waitForSession(await run.api(), id, isEnded, 30_000);
    expect(SessionState[done.state]).toBe("FAILED");
    expect(done.stopReason).toBe("unrecoverable_error");
    expect(done.answer).toMatch(
      /^stopped after 2 takeovers \(at most 1\): each replica that ran it stopped without handing it back/,
    );
    expect(done.usage?.takeovers).toBe(2);
    expect(asked).toBe(askedBefore);
    expect(await refundsOf(run.tools, "ord_DEMO00000002")).toEqual([]);
  }, 90_000);
});

async function until(done: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`not reached in ${ms} ms: ${what}`);
    await sleep(20);
  }
}

describe("the orchestrator stopped while a model call waits to be retried", () => {
  it("SIGTERM during the model's Retry-After pause: the process exits without waiting it out, and the next owner asks the model again", async () => {
    const busy = whenAsked(() => ({
      status: 429,
      headers: { "retry-after": "5" },
      body: { error: { message: "slow down" } },
    }));
    const run = await setUp("openai", [busy.reply, ...replanningModel("ord_DEMO00000001", 500)]);
    const id = await startRefund(run, "openai", "ord_DEMO00000001", 500);
    await busy.asked;
    await sleep(300);
    const stopping = performance.now();
    expect(await kill(run.orchestrator, "SIGTERM")).toBe(0);
    // The pause is 5 s; a stop that waited it out would take that long.
    expect(performance.now() - stopping).toBeLessThan(3000);
    await run.restart();
    await expectRefundedOnce(run, "ord_DEMO00000001", await waitForSession(await run.api(), id, isEnded, 30_000));
  }, 60_000);
});
