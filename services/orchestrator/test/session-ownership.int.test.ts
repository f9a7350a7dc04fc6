// Who sees and acts on which session, through the real gRPC API and Connect over HTTP:
// real tool processes, the harness' orchestrator, tokens of different subjects.
import { refusal } from "@loopguard/test-kit";
import {
  OrchestratorService,
  SessionState,
  type WatchSessionResponse,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, type RawClient, status } from "@loopguard/tool-sdk";
import { SESSION_OPERATOR_SCOPES, testToken } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decisionOn, HIGH_RISK_CUSTOMER, startRefund, useSuite, waitForSession } from "./harness.js";

type Api = RawClient<typeof OrchestratorService>;

const suite = useSuite({ orchestrator: { APPROVAL_TTL_MS: "120000" } });
const people: Record<"owner" | "stranger" | "approver" | "operator", { api: Api; token: string }> = {} as never;

beforeAll(async () => {
  const scopes = {
    owner: SESSION_OPERATOR_SCOPES,
    stranger: SESSION_OPERATOR_SCOPES,
    approver: ["sessions:read", "sessions:write", "approvals:write"],
    operator: ["sessions:read", "sessions:write", "sessions:admin"],
  };
  for (const [name, held] of Object.entries(scopes)) {
    const token = await testToken({ subject: name, scopes: held });
    people[name as keyof typeof people] = {
      api: createRawClient(OrchestratorService, suite.orch.server.address, { token }),
      token,
    };
  }
}, 60_000);
afterAll(async () => {
  for (const p of Object.values(people)) p.api.close();
});

/** The transitions a watch stream sends until it ends, and the error it ends with, if any. */
async function drain(stream: AsyncIterator<WatchSessionResponse>): Promise<{ to: string[]; error?: CallError }> {
  const to: string[] = [];
  try {
    for (let r = await stream.next(); !r.done; r = await stream.next())
      if (r.value.event.case === "transition") to.push(SessionState[r.value.event.value.to]);
    return { to };
  } catch (error) {
    return { to, error: error as CallError };
  }
}

const watchAll = (api: Api, sessionId: string) => drain(api.watchSession({ sessionId })[Symbol.asyncIterator]());

/** The same call over Connect, as the dashboard makes it: the answer's HTTP status. */
async function overHttp(token: string, method: string, body: unknown): Promise<number> {
  const res = await fetch(`${suite.orch.httpUrl}/${OrchestratorService.typeName}/${method}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

const waiting = (s: { state: SessionState }) => s.state === SessionState.AWAITING_APPROVAL;
const idsOf = async (api: Api, state?: SessionState) =>
  (await api.listSessions({ pageSize: 500, ...(state ? { state } : {}) })).sessions.map((s) => s.sessionId);

describe("a session belongs to the subject that started it", () => {
  it("another caller cannot get, watch, trace, read the detail of, list or cancel my session: NOT_FOUND exactly as for an unknown id", async () => {
    const { owner, stranger } = people;
    const question = (await owner.api.startSession({ goal: "What is the refund policy?", scopes: ["kb:read"] }))
      .session!.sessionId;
    const refund = await startRefund(owner.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
    await waitForSession(owner.api, question);
    await waitForSession(owner.api, refund, waiting);

    const unknown = await refusal(stranger.api.getSession({ sessionId: "ses_doesnotexist00000" }), CallError);
    for (const id of [question, refund]) {
      for (const call of [
        stranger.api.getSession({ sessionId: id }),
        stranger.api.getTrace({ sessionId: id }),
        stranger.api.getSessionDetail({ sessionId: id }),
        stranger.api.cancelSession({ sessionId: id, reason: "mine now" }),
      ]) {
        const error = await refusal(call, CallError);
        expect([status[error.code], error.reason, error.message]).toEqual([
          "NOT_FOUND",
          "SESSION_NOT_FOUND",
          unknown.message.replace("ses_doesnotexist00000", id),
        ]);
      }
      const watched = await watchAll(stranger.api, id);
      expect([watched.to, watched.error?.code, watched.error?.reason]).toEqual([
        [],
        status.NOT_FOUND,
        "SESSION_NOT_FOUND",
      ]);
      expect(await overHttp(stranger.token, "GetSessionDetail", { sessionId: id })).toBe(404);
      expect(await overHttp(stranger.token, "CancelSession", { sessionId: id })).toBe(404);
      expect(await overHttp(stranger.token, "GetSession", { sessionId: id })).toBe(404);
    }
    expect((await owner.api.getSession({ sessionId: refund })).session?.state).toBe(SessionState.AWAITING_APPROVAL);
    expect(await idsOf(stranger.api)).toEqual([]);
    expect((await stranger.api.listApprovals({})).approvals).toEqual([]);
    expect((await stranger.api.getOverview({})).total).toBe(0);
    expect(await idsOf(owner.api)).toEqual([question, refund]);
    expect((await owner.api.getOverview({})).counts).toMatchObject({ DONE: 1, AWAITING_APPROVAL: 1 });
    await owner.api.cancelSession({ sessionId: refund, reason: "test over" });
  });

  it("an approver reads a waiting session, its detail, trace and queue, but cannot cancel it; once it stops waiting it is gone for the approver", async () => {
    const { owner, approver } = people;
    const id = await startRefund(owner.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
    const shown = (await waitForSession(owner.api, id, waiting)).pendingApproval!;

    expect((await approver.api.getSession({ sessionId: id })).session?.pendingApproval?.approvalId).toBe(
      shown.approvalId,
    );
    expect((await approver.api.getSessionDetail({ sessionId: id })).transitions.at(-1)?.to).toBe("AWAITING_APPROVAL");
    expect((await approver.api.getTrace({ sessionId: id })).records.length).toBeGreaterThan(0);
    expect((await approver.api.listApprovals({})).approvals.map((s) => s.sessionId)).toContain(id);
    expect(await idsOf(approver.api)).toContain(id);
    expect((await approver.api.getOverview({})).counts?.AWAITING_APPROVAL).toBeGreaterThanOrEqual(1);
    const cancel = await refusal(approver.api.cancelSession({ sessionId: id, reason: "not mine" }), CallError);
    expect([status[cancel.code], cancel.reason]).toEqual(["PERMISSION_DENIED", "NOT_SESSION_OWNER"]);
    expect(await overHttp(approver.token, "CancelSession", { sessionId: id })).toBe(403);
    expect((await owner.api.getSession({ sessionId: id })).session?.state).toBe(SessionState.AWAITING_APPROVAL);

    // A watch the approver opened while the session waited sees it leave, and ends there.
    const stream = approver.api.watchSession({ sessionId: id })[Symbol.asyncIterator]();
    expect((await stream.next()).value?.event.case).toBe("snapshot");
    const watch = drain(stream);
    await approver.api.resolveApproval(decisionOn(id, shown, true, "checked"));
    const watched = await watch;
    expect(watched.to.at(-1)).toBe("TOOL_EXECUTING");
    expect(watched.to).not.toContain("DONE");
    expect([watched.error?.code, watched.error?.reason]).toEqual([status.NOT_FOUND, "SESSION_NOT_FOUND"]);

    expect((await waitForSession(owner.api, id)).stopReason).toBe("done");
    expect((await refusal(approver.api.getSession({ sessionId: id }), CallError)).reason).toBe("SESSION_NOT_FOUND");
    expect((await refusal(approver.api.getTrace({ sessionId: id }), CallError)).reason).toBe("SESSION_NOT_FOUND");
    expect(await idsOf(approver.api)).not.toContain(id);
    expect((await approver.api.listApprovals({})).approvals.map((s) => s.sessionId)).not.toContain(id);
    expect(await overHttp(approver.token, "GetSessionDetail", { sessionId: id })).toBe(404);
  });

  it.each([
    ["detail", (api: Api, sessionId: string) => api.getSessionDetail({ sessionId })],
    ["trace", (api: Api, sessionId: string) => api.getTrace({ sessionId })],
  ])(
    "an approver's %s read that the approval overtakes is NOT_FOUND, not the steps made after the session stopped waiting",
    async (_, read) => {
      const { owner, approver } = people;
      const id = await startRefund(owner.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
      const shown = (await waitForSession(owner.api, id, waiting)).pendingApproval!;
      // The approval lands, and the session ends, while the session's steps are being read.
      const store = suite.orch.orchestrator.store;
      const steps = store.steps.bind(store);
      let overtaken = false;
      (store as { steps: typeof store.steps }).steps = async (sessionId, after) => {
        if (!overtaken && sessionId === id) {
          overtaken = true;
          await approver.api.resolveApproval(decisionOn(id, shown, true, "checked"));
          await waitForSession(owner.api, id);
        }
        return steps(sessionId, after);
      };
      try {
        const refused = await refusal(read(approver.api, id), CallError);
        expect([status[refused.code], refused.reason]).toEqual(["NOT_FOUND", "SESSION_NOT_FOUND"]);
      } finally {
        (store as { steps: typeof store.steps }).steps = steps;
      }
      expect(overtaken).toBe(true);
    },
  );

  it("an approver's answer to a session it may not read is NOT_FOUND exactly as for an unknown id: it tells neither that the session exists nor how it ended", async () => {
    const { owner, approver } = people;
    const question = (await owner.api.startSession({ goal: "What is the refund policy?", scopes: ["kb:read"] }))
      .session!.sessionId;
    const refund = await startRefund(owner.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
    const shown = (await waitForSession(owner.api, refund, waiting)).pendingApproval!;
    await approver.api.resolveApproval(decisionOn(refund, shown, false, "not this one"));
    expect((await waitForSession(owner.api, refund)).stopReason).toBe("approval_denied");
    await waitForSession(owner.api, question);

    const answer = (sessionId: string) =>
      refusal(approver.api.resolveApproval(decisionOn(sessionId, shown, true, "late")), CallError);
    const unknown = await answer("ses_doesnotexist00000");
    expect([status[unknown.code], unknown.reason]).toEqual(["NOT_FOUND", "SESSION_NOT_FOUND"]);
    for (const id of [question, refund]) {
      const refused = await answer(id);
      expect([status[refused.code], refused.reason, refused.message]).toEqual([
        "NOT_FOUND",
        "SESSION_NOT_FOUND",
        unknown.message.replace("ses_doesnotexist00000", id),
      ]);
    }
  });

  it("sessions:admin sees, follows and cancels every caller's sessions", async () => {
    const { owner, stranger, operator } = people;
    const ownerRefund = await startRefund(owner.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
    const strangerQuestion = (
      await stranger.api.startSession({ goal: "How long do card refunds take?", scopes: ["kb:read"] })
    ).session!.sessionId;
    await waitForSession(owner.api, ownerRefund, waiting);
    await waitForSession(stranger.api, strangerQuestion);

    const all = await idsOf(operator.api);
    expect(all).toEqual(expect.arrayContaining([ownerRefund, strangerQuestion]));
    expect(all.length).toBe((await suite.orch.orchestrator.store.list({ limit: 500 })).sessions.length);
    expect((await operator.api.getOverview({})).total).toBe(all.length);
    expect((await operator.api.listApprovals({})).approvals.map((s) => s.sessionId)).toContain(ownerRefund);
    expect((await operator.api.getTrace({ sessionId: strangerQuestion })).records.length).toBeGreaterThan(0);
    expect((await watchAll(operator.api, strangerQuestion)).to.at(-1)).toBe("DONE");
    const cancelled = (await operator.api.cancelSession({ sessionId: ownerRefund, reason: "operator stop" })).session!;
    expect([SessionState[cancelled.state], cancelled.answer]).toEqual([
      "CANCELLED",
      "cancelled by operator: operator stop",
    ]);
    expect(await overHttp(operator.token, "GetSessionDetail", { sessionId: strangerQuestion })).toBe(200);
  });
});
