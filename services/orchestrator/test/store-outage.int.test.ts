// The orchestrator on a real PostgreSQL that is stopped and started again under it: the API says
// UNAVAILABLE / STORE_UNAVAILABLE with RetryInfo (HTTP 503 + Retry-After), the errors are
// counted, claims back off instead of spinning, no session fails for the outage, and after the
// restart sessions resume and watchers hear them again. Then the same through a network that goes
// silent (a TCP proxy cut: no refusal, no reset), the failure only the client's read timeout ends.
import { setTimeout as sleep } from "node:timers/promises";
import { refusal } from "@loopguard/test-kit";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { CallError, createRawClient, status } from "@loopguard/tool-sdk";
import { metricValue, testToken } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresServer, postgresSkipReason, startPostgres, startTcpProxy } from "@loopguard/sql-store/testing";
import {
  ALL_SCOPES,
  decisionOn,
  LOW_RISK_CUSTOMER,
  refundsOf,
  setFaults,
  useSuite,
  waitForSession,
} from "./harness.js";

const skip = postgresSkipReason();
if (skip) console.warn(`[orchestrator] skipping the store outage test: ${skip}`);

const HIGH_RISK = { id_card: "110101199810246781", phone: "+8617712345678" };

describe.skipIf(skip !== null)("the orchestrator while its PostgreSQL store is down", () => {
  let database: PostgresServer;
  beforeAll(async () => {
    database = await startPostgres();
  }, 120_000);
  afterAll(async () => {
    await database?.stop();
  }, 60_000);
  // Hooks registered after the database's: the tools and the orchestrator start after it and stop before it.
  const suite = useSuite({
    orchestrator: async () => ({
      ORCHESTRATOR_STORE: await database.createDatabase("outage"),
      APPROVAL_TTL_MS: "300000",
    }),
  });

  const logged = (message: string) =>
    suite.orch.logs.filter((line) => (JSON.parse(line) as { msg: string }).msg === message);

  it("refuses calls with STORE_UNAVAILABLE and RetryInfo, counts them, backs off, fails no session, and resumes everything after the restart", async () => {
    // A session waiting for approval, watched from before the outage.
    const { session: refund } = await suite.orch.api.startSession({
      goal: "Refund 10.00 of ord_DEMO00000008",
      task: {
        kind: "refund",
        order_id: "ord_DEMO00000008",
        amount_cents: 1000,
        reason: "DAMAGED",
        ...HIGH_RISK,
      } as never,
      scopes: ALL_SCOPES,
    });
    const waitingId = refund!.sessionId;
    const shown = (await waitForSession(suite.orch.api, waitingId, (s) => s.state === SessionState.AWAITING_APPROVAL))
      .pendingApproval!;
    const watch = suite.orch.api.watchSession({ sessionId: waitingId })[Symbol.asyncIterator]();
    for (
      let r = await watch.next();
      !(r.value?.event.case === "transition" && r.value.event.value.to === SessionState.AWAITING_APPROVAL);
      r = await watch.next()
    );
    const heardAfter = (async () => {
      const states: string[] = [];
      for (let r = await watch.next(); !r.done; r = await watch.next())
        if (r.value.event.case === "transition") states.push(SessionState[r.value.event.value.to]);
      return states;
    })();

    // A session in the middle of a (slowed) tool call when the database goes away.
    const admin = createRawClient(ToolAdminService, suite.tools.kb.address, {
      token: await testToken({ subject: "drill", scopes: ["tool:admin"], audience: "kb-search" }),
    });
    await admin.setFaults({ profile: { addedLatencyMs: 800 } });
    const { session: question } = await suite.orch.api.startSession({
      goal: "How long do card refunds take?",
      scopes: ["kb:read"],
    });
    const runningId = question!.sessionId;
    await waitForSession(suite.orch.api, runningId, (s: Session) => s.state === SessionState.TOOL_EXECUTING, 10_000);
    const errorsBefore = metricValue(
      await (await fetch(`${suite.orch.httpUrl}/metrics`)).text(),
      "loopguard_store_errors_total",
    );

    await database.halt("fast");
    try {
      const read = await refusal(suite.orch.api.getSession({ sessionId: waitingId }), CallError);
      expect(read.code).toBe(status.UNAVAILABLE);
      expect(read.reason).toBe("STORE_UNAVAILABLE");
      expect(read.retryAfterMs).toBe(1000);
      expect(read.metadata).toEqual({ operation: "get" });
      const start = await refusal(
        suite.orch.api.startSession({ goal: "What is the refund policy?", scopes: ["kb:read"] }),
        CallError,
      );
      expect([start.code, start.reason]).toEqual([status.UNAVAILABLE, "STORE_UNAVAILABLE"]);

      const token = await testToken({ subject: "test", scopes: ["sessions:read"] });
      const http = await fetch(`${suite.orch.httpUrl}/${OrchestratorService.typeName}/GetSessionDetail`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ sessionId: waitingId }),
      });
      expect(http.status).toBe(503);
      expect(http.headers.get("retry-after")).toBe("1");
      const { details } = (await http.json()) as { details: { type: string; debug: { reason?: string } }[] };
      expect(details.find((d) => d.type === "google.rpc.ErrorInfo")?.debug.reason).toBe("STORE_UNAVAILABLE");

      // The slowed call finishes meanwhile; its session waits for the store rather than failing.
      await sleep(2500);
      const metrics = await fetch(`${suite.orch.httpUrl}/metrics`);
      expect(metrics.status).toBe(200);
      const page = await metrics.text();
      expect(metricValue(page, "loopguard_store_errors_total", { operation: "get" })).toBeGreaterThanOrEqual(2);
      expect(metricValue(page, "loopguard_store_errors_total", { operation: "create" })).toBeGreaterThanOrEqual(1);
      expect(metricValue(page, "loopguard_store_errors_total")).toBeGreaterThan(errorsBefore + 3);
      // Claims tick every second and failed each time, yet the outage is logged once, not per tick.
      expect(logged("claiming sessions failed; backing off until the store answers")).toHaveLength(1);
      expect(
        logged("session store unavailable; the session waits for it").map(
          (l) => (JSON.parse(l) as { session_id: string }).session_id,
        ),
      ).toEqual([runningId]);
    } finally {
      await database.resume();
    }

    const done = await waitForSession(suite.orch.api, runningId, undefined, 30_000);
    expect(SessionState[done.state]).toBe("DONE");
    expect(done.stopReason).toBe("done");
    // The slowed Search was answered during the outage (or just before), and the session asked again
    // after it: one call of the session, paid once (kb-search's 100 micros), whichever answer it kept.
    expect(Number(done.usage!.costMicros)).toBe(100);
    expect(logged("claiming sessions again")).toHaveLength(1);
    await admin.setFaults({ profile: {} });
    admin.close();

    // The waiting session is approved after the restart and runs; its watcher, opened before the
    // outage, hears every move (its listening connection came back) through to the end.
    await suite.orch.approver.resolveApproval(decisionOn(waitingId, shown, true, "checked"));
    expect((await waitForSession(suite.orch.api, waitingId, undefined, 30_000)).stopReason).toBe("done");
    const states = await heardAfter;
    expect(states[0]).toBe("TOOL_EXECUTING");
    expect(states.at(-1)).toBe("DONE");
  });

  it("rides out a network to its database that goes silent past the lease TTL: calls hear STORE_UNAVAILABLE within the read timeout instead of waiting out their deadline, no session fails for it, and everything goes on afterwards", async () => {
    const url = new URL(await database.createDatabase("partition"));
    const proxy = await startTcpProxy(Number(url.port));
    suite.onCleanUp(() => proxy.close());
    url.port = String(proxy.port);
    const orch = await suite.startOrchestrator({
      ORCHESTRATOR_STORE: url.toString(),
      ORCHESTRATOR_LEASE_TTL_MS: "2000",
    });
    const admin = createRawClient(ToolAdminService, suite.tools.kb.address, {
      token: await testToken({ subject: "drill", scopes: ["tool:admin"], audience: "kb-search" }),
    });
    suite.onCleanUp(() => admin.close());
    await admin.setFaults({ profile: { addedLatencyMs: 800 } });
    const { session: running } = await orch.api.startSession({
      goal: "How long do card refunds take?",
      scopes: ["kb:read"],
    });
    const runningId = running!.sessionId;
    await waitForSession(orch.api, runningId, (s: Session) => s.state === SessionState.TOOL_EXECUTING, 10_000);

    proxy.cut();
    try {
      const heard = async (call: Promise<unknown>) => {
        const started = Date.now();
        const error = await refusal(call, CallError);
        return { code: error.code, reason: error.reason, fast: Date.now() - started < 4000 };
      };
      const unavailable = { code: status.UNAVAILABLE, reason: "STORE_UNAVAILABLE", fast: true };
      // The store gives up on a reply 2 s after sending it (its 1 s timeouts + 1 s); the callers' deadline is 10 s.
      const options = { deadline: 10_000 };
      expect(await heard(orch.api.getSession({ sessionId: runningId }, options))).toEqual(unavailable);
      expect(
        await heard(orch.api.startSession({ goal: "What is the refund policy?", scopes: ["kb:read"] }, options)),
      ).toEqual(unavailable);
      // The orchestrator itself still answers while its store does not.
      const metrics = await fetch(`${orch.httpUrl}/metrics`, { signal: AbortSignal.timeout(2000) });
      expect(metrics.status).toBe(200);
      // Past the lease TTL: the slowed call has come back meanwhile, and its session must wait for the store, not fail.
      await sleep(3000);
    } finally {
      proxy.restore();
      await admin.setFaults({ profile: {} });
    }

    const done = await waitForSession(orch.api, runningId, undefined, 30_000);
    expect([SessionState[done.state], done.stopReason]).toEqual(["DONE", "done"]);
    const { session: next } = await orch.api.startSession({ goal: "What is the refund policy?", scopes: ["kb:read"] });
    expect(SessionState[(await waitForSession(orch.api, next!.sessionId, undefined, 30_000)).state]).toBe("DONE");
    // No session was made by the start refused during the cut.
    const { sessions } = await orch.api.listSessions({ pageSize: 50 });
    expect(sessions.map((s) => s.sessionId).sort()).toEqual([runningId, next!.sessionId].sort());
  });

  it("never reports a refund made while the store was down as not made: the run after the outage re-sends it as interrupted", async () => {
    const order = "ord_DEMO00000001";
    const before = (await refundsOf(suite.tools, order)).length;
    // Billing makes the refund at once and answers 1.5 s later.
    await setFaults(suite.tools, "billing", { responseDelayMs: 1500, methods: ["Refund"] });
    try {
      const { session } = await suite.orch.api.startSession({
        goal: `Refund 7.00 of ${order}`,
        task: { kind: "refund", order_id: order, amount_cents: 700, reason: "DAMAGED", ...LOW_RISK_CUSTOMER } as never,
        scopes: ALL_SCOPES,
        budget: { maxWallClockMs: 20_000 },
      });
      const until = Date.now() + 15_000;
      while ((await refundsOf(suite.tools, order)).length === before && Date.now() < until) await sleep(20);
      // The store goes down while the refund's answer is on its way, and billing goes down after answering.
      await database.halt("fast");
      try {
        await sleep(2500);
        await setFaults(suite.tools, "billing", { outage: true, methods: ["Refund"] });
      } finally {
        await database.resume();
      }
      const settled = await waitForSession(
        suite.orch.api,
        session!.sessionId,
        (s) =>
          [SessionState.AWAITING_APPROVAL, SessionState.DONE, SessionState.FAILED, SessionState.CANCELLED].includes(
            s.state,
          ),
        40_000,
      );
      expect((await refundsOf(suite.tools, order)).length).toBe(before + 1);
      expect(settled.answer).not.toMatch(/was not made/);
      // The re-send could not settle it (billing down): a human decides, and approving re-sends it under its key.
      expect([SessionState[settled.state], settled.pendingApproval?.reason]).toEqual([
        "AWAITING_APPROVAL",
        expect.stringMatching(/outcome of an earlier attempt is unknown|outcome of billing_refund unknown/),
      ]);
      await suite.orch.api.cancelSession({ sessionId: session!.sessionId, reason: "test over" });
    } finally {
      await setFaults(suite.tools, "billing", {});
    }
  }, 120_000);
});
