// Sessions end to end: real tool processes, a real orchestrator API, the scripted policy.
import { mkdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { refusal } from "@loopguard/test-kit";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, status } from "@loopguard/tool-sdk";
import { metricValue, SESSION_OPERATOR_SCOPES, testToken } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { listTraceFiles } from "../src/governance/trace-files.js";
import { ALL_SCOPES, decisionOn, refundsOf, useSuite, waitForSession } from "./harness.js";

const LOW_RISK = { id_card: "110101198003121232", phone: "+8613800138000" };
const HIGH_RISK = { id_card: "110101199810246781", phone: "+8617712345678" };

const suite = useSuite({ orchestrator: { APPROVAL_TTL_MS: "60000" } });

function refundTask(orderId: string, amount: number, customer: Record<string, string> | undefined = LOW_RISK) {
  return { kind: "refund", order_id: orderId, amount_cents: amount, reason: "DAMAGED", ...customer };
}

async function start(goal: string, task: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const { session } = await suite.orch.api.startSession({
    goal,
    task: task as never,
    scopes: ALL_SCOPES,
    policy: "scripted",
    ...extra,
  });
  return session!;
}

describe("refund sessions", () => {
  it("the happy path ends DONE with an answer citing the policy document and the refund id", async () => {
    const s = await start("Refund 3.00 of ord_DEMO00000001", refundTask("ord_DEMO00000001", 300));
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(SessionState[done.state]).toBe("DONE");
    expect(done.stopReason).toBe("done");
    expect(done.answer).toMatch(/\[refund-policy@\d+\]/);
    const refundId = /rf_[A-Za-z0-9]{16}/.exec(done.answer)?.[0];
    expect(refundId).toBeDefined();
    expect((await refundsOf(suite.tools, "ord_DEMO00000001")).map((r) => r.refundId)).toContain(refundId);
    const trace = (await suite.orch.api.getTrace({ sessionId: s.sessionId })).records.map(
      (r) => JSON.parse(r) as Record<string, unknown>,
    );
    expect(trace.length).toBeGreaterThanOrEqual(8);
    for (const record of trace) {
      expect(record.session_id).toBe(s.sessionId);
      expect(record.trace_id).toBe(done.traceId);
      expect(String(record.traceparent)).toContain(done.traceId);
      for (const key of ["run_id", "step", "state_before", "state_after", "decision", "budget_before", "duration_ms"])
        expect(record).toHaveProperty(key);
    }
    // The rolling JSONL files get the same records, appended after each commit; read oldest file first.
    const lines = async () =>
      (await listTraceFiles(join(suite.orch.dataDir, "traces"))).flatMap((file) =>
        readFileSync(file.path, "utf8")
          .split("\n")
          .filter((line) => line.includes(s.sessionId))
          .map((line) => JSON.parse(line) as Record<string, unknown>),
      );
    for (let i = 0; i < 40 && (await lines()).length < trace.length; i += 1)
      await new Promise((r) => setTimeout(r, 50));
    expect(await lines()).toEqual(trace);
    // Traces and the session database are for the operator alone.
    expect([
      statSync(join(suite.orch.dataDir, "traces")).mode & 0o777,
      statSync(join(suite.orch.dataDir, "orchestrator.db")).mode & 0o777,
    ]).toEqual([0o700, 0o600]);
  });

  it("a step-trace file that cannot be opened fails no session: the orchestrator logs it once and counts each failure", async () => {
    const orch = await suite.startOrchestrator({ APPROVAL_TTL_MS: "60000" });
    mkdirSync(join(orch.dataDir, "traces", `steps.${new Date().toISOString().slice(0, 10)}.1.jsonl`), {
      recursive: true,
    });
    const ids: string[] = [];
    for (const goal of ["How long do card refunds take?", "What is the refund policy?"]) {
      const { session } = await orch.api.startSession({ goal, scopes: ["kb:read"], policy: "scripted" });
      ids.push(session!.sessionId);
      expect(SessionState[(await waitForSession(orch.api, session!.sessionId)).state]).toBe("DONE");
    }
    // Every step is still in the store.
    for (const sessionId of ids) expect((await orch.api.getTrace({ sessionId })).records.length).toBeGreaterThan(1);
    const warned = orch.logs.filter((line) => line.includes("step trace file failed"));
    expect(warned).toHaveLength(1);
    expect(warned[0]).toContain("not a file");
    const page = await (await fetch(`${orch.httpUrl}/metrics`)).text();
    expect(metricValue(page, "loopguard_trace_file_errors_total")).toBe(1);
  });

  it("a high-risk refund waits in AWAITING_APPROVAL, and approve completes it", async () => {
    const s = await start("Refund 10.00 of ord_DEMO00000008", refundTask("ord_DEMO00000008", 1000, HIGH_RISK));
    const waiting = await waitForSession(
      suite.orch.api,
      s.sessionId,
      (x) => x.state === SessionState.AWAITING_APPROVAL,
    );
    expect(waiting.pendingApproval?.tool).toBe("billing_refund");
    expect(waiting.pendingApproval?.reason).toMatch(/risk score 92/);
    expect(JSON.stringify(waiting.pendingApproval?.arguments)).not.toContain(HIGH_RISK.id_card);
    const before = (await refundsOf(suite.tools, "ord_DEMO00000008")).length;
    const shown = waiting.pendingApproval!;
    await suite.orch.approver.resolveApproval(decisionOn(s.sessionId, shown, true, "verified by phone"));
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("done");
    expect((await refundsOf(suite.tools, "ord_DEMO00000008")).length).toBe(before + 1);
    const trail = (await suite.orch.orchestrator.store.auditTrail(s.sessionId)).map((a) => a.reason);
    expect(trail).toContain("approved by test-approver: verified by phone");
  });

  it("the session's creator cannot approve its own action (four eyes); a named approver field must be the caller", async () => {
    const s = await start("Refund 10.00 of ord_DEMO00000008", refundTask("ord_DEMO00000008", 1000, HIGH_RISK));
    const shown = (await waitForSession(suite.orch.api, s.sessionId, (x) => x.state === SessionState.AWAITING_APPROVAL))
      .pendingApproval!;
    const own = await refusal(suite.orch.api.resolveApproval(decisionOn(s.sessionId, shown, true)), CallError);
    expect(own.code).toBe(status.PERMISSION_DENIED);
    expect(own.reason).toBe("SELF_APPROVAL");
    const impersonated = await refusal(
      suite.orch.approver.resolveApproval({ ...decisionOn(s.sessionId, shown, true), approver: "alice" }),
      CallError,
    );
    expect(impersonated.code).toBe(status.INVALID_ARGUMENT);
    expect(impersonated.fieldViolations.map((v) => v.field)).toEqual(["approver"]);
    expect((await suite.orch.api.getSession({ sessionId: s.sessionId })).session?.state).toBe(
      SessionState.AWAITING_APPROVAL,
    );
    await suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "test over" });
  });

  it("deny stops the session with approval_denied and refunds nothing", async () => {
    const before = (await refundsOf(suite.tools, "ord_DEMO00000008")).length;
    const s = await start("Refund 10.00 of ord_DEMO00000008", refundTask("ord_DEMO00000008", 1000, HIGH_RISK));
    const waiting = await waitForSession(
      suite.orch.api,
      s.sessionId,
      (x) => x.state === SessionState.AWAITING_APPROVAL,
    );
    const shown = waiting.pendingApproval!;
    await suite.orch.approver.resolveApproval(decisionOn(s.sessionId, shown, false, "suspicious"));
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(SessionState[done.state]).toBe("FAILED");
    expect(done.stopReason).toBe("approval_denied");
    expect((await refundsOf(suite.tools, "ord_DEMO00000008")).length).toBe(before);
  });

  it("refuses a stale approval: another approval id, or the right id with other arguments; nothing is approved", async () => {
    const s = await start("Refund 10.00 of ord_DEMO00000008", refundTask("ord_DEMO00000008", 1000, HIGH_RISK));
    const shown = (await waitForSession(suite.orch.api, s.sessionId, (x) => x.state === SessionState.AWAITING_APPROVAL))
      .pendingApproval!;
    const error = await refusal(
      suite.orch.approver.resolveApproval({
        ...decisionOn(s.sessionId, shown, true),
        approvalId: "apr_someotheraction000",
      }),
      CallError,
    );
    expect(error.code).toBe(status.FAILED_PRECONDITION);
    expect(error.reason).toBe("APPROVAL_MISMATCH");
    const otherArgs = await refusal(
      suite.orch.approver.resolveApproval({ ...decisionOn(s.sessionId, shown, true), argumentsHash: "0".repeat(32) }),
      CallError,
    );
    expect(otherArgs.code).toBe(status.FAILED_PRECONDITION);
    expect(otherArgs.reason).toBe("APPROVAL_MISMATCH");
    expect((await suite.orch.api.getSession({ sessionId: s.sessionId })).session?.state).toBe(
      SessionState.AWAITING_APPROVAL,
    );
    await suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "test over" });
  });

  it("two answers to one approval at once: one lands, the other is told FAILED_PRECONDITION, or NOT_FOUND if the session already left its sight; a cancel racing an answer always lands", async () => {
    const second = createRawClient(OrchestratorService, suite.orch.server.address, {
      token: await testToken({ subject: "second-approver", scopes: ["sessions:read", "approvals:write"] }),
    });
    const outcome = (call: Promise<unknown>) =>
      call.then(
        () => "ok",
        (error: CallError) => `${status[error.code]} ${error.reason}`,
      );
    try {
      for (const [first, other] of [
        ["approve", "approve"],
        ["deny", "deny"],
        ["approve", "cancel"],
      ] as const) {
        const s = await start("Refund 10.00 of ord_DEMO00000008", refundTask("ord_DEMO00000008", 1000, HIGH_RISK));
        const shown = (
          await waitForSession(suite.orch.api, s.sessionId, (x) => x.state === SessionState.AWAITING_APPROVAL)
        ).pendingApproval!;
        const answers = await Promise.all([
          outcome(suite.orch.approver.resolveApproval(decisionOn(s.sessionId, shown, first === "approve", "one"))),
          outcome(
            other === "cancel"
              ? suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "withdrawn" })
              : second.resolveApproval(decisionOn(s.sessionId, shown, other === "approve", "two")),
          ),
        ]);
        const overtaken = /^(FAILED_PRECONDITION (APPROVAL_MISMATCH|SESSION_TERMINAL)|NOT_FOUND SESSION_NOT_FOUND)$/;
        const ended = await waitForSession(suite.orch.api, s.sessionId);
        if (other === "cancel") {
          // A cancel always lands: after the approval (which it stops, sent or not) or before it (which then changes nothing).
          expect(answers[1], `${first}/${other}: ${answers}`).toBe("ok");
          expect(answers[0], `${first}/${other}: ${answers}`).toMatch(
            /^ok$|^FAILED_PRECONDITION SESSION_TERMINAL$|^NOT_FOUND SESSION_NOT_FOUND$/,
          );
          expect(SessionState[ended.state]).toBe("CANCELLED");
          continue;
        }
        expect(
          answers.filter((a) => a === "ok"),
          `${first}/${other}: ${answers}`,
        ).toHaveLength(1);
        expect(answers.find((a) => a !== "ok")).toMatch(overtaken);
      }
    } finally {
      second.close();
    }
  });

  it("an amount above the threshold needs approval even for a low-risk customer", async () => {
    const s = await start("Refund 900.00 of ord_DEMO00000002", refundTask("ord_DEMO00000002", 90_000));
    const waiting = await waitForSession(
      suite.orch.api,
      s.sessionId,
      (x) => x.state === SessionState.AWAITING_APPROVAL,
    );
    expect(waiting.pendingApproval?.reason).toMatch(/above the approval threshold/);
    const cancelled = (await suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "customer withdrew" }))
      .session!;
    expect(SessionState[cancelled.state]).toBe("CANCELLED");
    expect(cancelled.stopReason).toBe("cancelled");
  });

  it("an unpaid order ends DONE with an explanation and no refund", async () => {
    const s = await start("Refund ord_DEMO00000003", refundTask("ord_DEMO00000003", 100));
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("done");
    expect(done.answer).toMatch(/cannot be refunded/);
    expect(await refundsOf(suite.tools, "ord_DEMO00000003")).toHaveLength(0);
  });

  it("a retried StartSession with the same idempotency key returns the first session", async () => {
    const first = await suite.orch.api.startSession({
      goal: "What is the refund policy?",
      scopes: ALL_SCOPES,
      idempotencyKey: "start-key-1",
    });
    const again = await suite.orch.api.startSession({
      goal: "What is the refund policy?",
      scopes: ALL_SCOPES,
      idempotencyKey: "start-key-1",
    });
    expect(first.created).toBe(true);
    expect(again.created).toBe(false);
    expect(again.session?.sessionId).toBe(first.session?.sessionId);
    const other = await refusal(
      suite.orch.api.startSession({ goal: "Something else", scopes: ALL_SCOPES, idempotencyKey: "start-key-1" }),
      CallError,
    );
    expect(other.code).toBe(status.ALREADY_EXISTS);
    // The whole request counts, not only goal and policy: other scopes or another budget is another request.
    const narrower = await refusal(
      suite.orch.api.startSession({
        goal: "What is the refund policy?",
        scopes: ["kb:read"],
        idempotencyKey: "start-key-1",
      }),
      CallError,
    );
    expect(narrower.code).toBe(status.ALREADY_EXISTS);
    const otherBudget = await refusal(
      suite.orch.api.startSession({
        goal: "What is the refund policy?",
        scopes: ALL_SCOPES,
        budget: { maxSteps: 3 },
        idempotencyKey: "start-key-1",
      }),
      CallError,
    );
    expect(otherBudget.reason).toBe("IDEMPOTENCY_KEY_REUSED");
  });

  it("idempotency keys belong to their caller: another caller's same key starts its own session", async () => {
    const mine = await suite.orch.api.startSession({
      goal: "What is the refund policy?",
      scopes: ["kb:read"],
      idempotencyKey: "shared-start-key",
    });
    const token = await testToken({ subject: "someone-else", scopes: SESSION_OPERATOR_SCOPES });
    const theirs = createRawClient(OrchestratorService, suite.orch.server.address, { token });
    try {
      const started = await theirs.startSession({
        goal: "What is the refund policy?",
        scopes: ["kb:read"],
        idempotencyKey: "shared-start-key",
      });
      expect(started.created).toBe(true);
      expect(started.session?.sessionId).not.toBe(mine.session?.sessionId);
      expect(started.session?.createdBy).toBe("someone-else");
      expect(mine.session?.createdBy).toBe("test");
    } finally {
      theirs.close();
    }
  });

  it("a knowledge question is answered citing the documents found", async () => {
    const s = await start("How long do card refunds take?", {});
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("done");
    expect(done.answer).toMatch(/\[[a-z0-9-]+@\d+\]/);
  });

  it("a question with subgoals searches once per subgoal and cites what each search found", async () => {
    const subgoals = ["which refunds need an approval", "what cannot be returned"];
    const s = await start("How long do card refunds take?", { kind: "question", subgoals });
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("done");
    expect(done.usage?.toolCalls).toBe(3);
    const calls = (await suite.orch.api.getTrace({ sessionId: s.sessionId })).records
      .map(
        (r) =>
          JSON.parse(r) as {
            decision: { kind: string; arguments?: string };
            result: { data?: { hits?: { docId: string; version: number }[] } } | null;
          },
      )
      .filter((r) => r.decision.kind === "tool_call");
    expect(calls.map((r) => (JSON.parse(r.decision.arguments!) as { query: string }).query)).toEqual([
      "How long do card refunds take?",
      ...subgoals,
    ]);
    // Every search found something, and the answer cites every document any search returned.
    for (const call of calls) {
      const hits = call.result?.data?.hits ?? [];
      expect(hits.length).toBeGreaterThan(0);
      for (const hit of hits) expect(done.answer).toContain(`[${hit.docId}@${hit.version}]`);
    }
  });

  it("rejects a bad StartSession with field violations", async () => {
    const error = await refusal(
      suite.orch.api.startSession({ goal: "", scopes: ["not a scope"], policy: "magic" }),
      CallError,
    );
    expect(error.code).toBe(status.INVALID_ARGUMENT);
    expect(error.fieldViolations.map((v) => v.field).sort()).toEqual(["goal", "policy", "scopes[0]"]);
  });
});

describe("who may grant what", () => {
  it("a caller holding only sessions:write cannot give a session billing:refund: PERMISSION_DENIED naming the scope, no session, no refund", async () => {
    const before = (await refundsOf(suite.tools, "ord_DEMO00000001")).length;
    const token = await testToken({ subject: "intern", scopes: ["sessions:read", "sessions:write"] });
    const intern = createRawClient(OrchestratorService, suite.orch.server.address, { token });
    try {
      const listedBefore = (await suite.orch.api.listSessions({ pageSize: 500 })).sessions.length;
      const error = await refusal(
        intern.startSession({
          goal: "Refund 3.00 of ord_DEMO00000001",
          task: refundTask("ord_DEMO00000001", 300) as never,
          scopes: ["billing:refund"],
        }),
        CallError,
      );
      expect(error.code).toBe(status.PERMISSION_DENIED);
      expect(error.reason).toBe("SCOPE_NOT_GRANTABLE");
      expect(error.message).toContain("billing:refund");
      expect((await suite.orch.api.listSessions({ pageSize: 500 })).sessions.length).toBe(listedBefore);
      await new Promise((r) => setTimeout(r, 300));
      expect((await refundsOf(suite.tools, "ord_DEMO00000001")).length).toBe(before);
    } finally {
      intern.close();
    }
  });

  it("no caller can grant an operator scope to a session, even one it holds", async () => {
    for (const scope of ["sessions:write", "approvals:write", "tool:admin", "sessions:read", "sessions:admin"]) {
      const error = await refusal(
        suite.orch.api.startSession({ goal: "escalate", scopes: ["kb:read", scope] }),
        CallError,
      );
      expect(error.code).toBe(status.PERMISSION_DENIED);
      expect(error.message).toContain(scope);
    }
  });

  it("a task larger than 16 KiB or nested deeper than 8 levels is refused with INVALID_ARGUMENT on task", async () => {
    const large = await refusal(
      suite.orch.api.startSession({ goal: "big", task: { blob: "x".repeat(17 * 1024) } as never, scopes: ["kb:read"] }),
      CallError,
    );
    expect(large.code).toBe(status.INVALID_ARGUMENT);
    expect(large.fieldViolations).toEqual([{ field: "task", description: expect.stringMatching(/at most 16384/) }]);
    let deep: Record<string, unknown> = { leaf: true };
    for (let i = 0; i < 9; i += 1) deep = { inner: deep };
    const nested = await refusal(
      suite.orch.api.startSession({ goal: "deep", task: deep as never, scopes: ["kb:read"] }),
      CallError,
    );
    expect(nested.fieldViolations[0]?.description).toMatch(/at most 8/);
  });

  it("a number that is not finite or a NUL anywhere in a request is INVALID_ARGUMENT on its field before any store sees it (PostgreSQL text holds no NUL), nothing written", async () => {
    const before = (await suite.orch.api.listSessions({ pageSize: 500 })).sessions.length;
    const refused = async (request: Record<string, unknown>) =>
      (await refusal(suite.orch.api.startSession({ goal: "g", scopes: ["kb:read"], ...request } as never), CallError))
        .fieldViolations;
    for (const value of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])
      expect(await refused({ task: { amount_cents: value } })).toEqual([
        { field: "task", description: "the task holds a number that is not finite" },
      ]);
    expect(await refused({ task: { items: [{ note: "a\u0000b" }] } })).toEqual([
      { field: "task", description: "the task holds a NUL character (U+0000)" },
    ]);
    expect(await refused({ task: { "a\u0000b": 1 } })).toEqual([
      { field: "task", description: "the task holds a NUL character (U+0000) in a key" },
    ]);
    expect((await refused({ goal: "a\u0000b" })).map((v) => v.field)).toEqual(["goal"]);
    expect((await suite.orch.api.listSessions({ pageSize: 500 })).sessions).toHaveLength(before);
    const s = await start("What is the refund policy?", { kind: "question" });
    const cancel = await refusal(
      suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "a\u0000b" }),
      CallError,
    );
    expect([cancel.code, cancel.fieldViolations.map((v) => v.field)]).toEqual([status.INVALID_ARGUMENT, ["reason"]]);
    const lookup = await refusal(suite.orch.api.getSession({ sessionId: "ses_\u0000" }), CallError);
    expect([lookup.code, lookup.fieldViolations.map((v) => v.field)]).toEqual([
      status.INVALID_ARGUMENT,
      ["session_id"],
    ]);
  });

  it("lists leave the task out; GetSession has it", async () => {
    const s = await start("What is the refund policy?", {
      kind: "question",
      subgoals: ["how long do card refunds take"],
    });
    const listed = (await suite.orch.api.listSessions({ pageSize: 500 })).sessions.find(
      (x) => x.sessionId === s.sessionId,
    )!;
    expect(listed.task).toBeUndefined();
    expect((await suite.orch.api.getSession({ sessionId: s.sessionId })).session?.task?.subgoals).toEqual([
      "how long do card refunds take",
    ]);
  });
});

describe("stop reasons", () => {
  it("max_steps: step max+1 is never executed", async () => {
    const s = await start("Refund", refundTask("ord_DEMO00000002", 100), { budget: { maxSteps: 2 } });
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("max_steps");
    expect(done.usage?.steps).toBe(2);
    const decisions = (await suite.orch.api.getTrace({ sessionId: s.sessionId })).records.filter((r) =>
      r.includes('"kind":"tool_calls"'),
    );
    expect(decisions).toHaveLength(2);
  });

  it("max_tool_calls: the call past the limit is not made", async () => {
    const s = await start("Refund", refundTask("ord_DEMO00000002", 100), { budget: { maxToolCalls: 1 } });
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("max_tool_calls");
    expect(done.usage?.toolCalls).toBe(1);
  });

  it("max_tokens", async () => {
    const s = await start("Refund", refundTask("ord_DEMO00000002", 100), { budget: { maxTokens: 100n } });
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("max_tokens");
    // Checked before the policy is asked: the prompt and the reply's reserve do not fit 100 tokens, so none are spent.
    expect(Number(done.usage?.tokens)).toBe(0);
    expect(done.answer).toMatch(/without calling the model/);
  });

  it("max_cost: stops before the call that would pass the money budget", async () => {
    const s = await start("Refund", refundTask("ord_DEMO00000002", 100), { budget: { maxCostMicros: 150n } });
    const done = await waitForSession(suite.orch.api, s.sessionId);
    expect(done.stopReason).toBe("max_cost");
    expect(Number(done.usage?.costMicros)).toBeLessThanOrEqual(150);
  });

  it("permission_denied: a session without billing:refund never refunds", async () => {
    const before = (await refundsOf(suite.tools, "ord_DEMO00000002")).length;
    const { session } = await suite.orch.api.startSession({
      goal: "Refund",
      task: refundTask("ord_DEMO00000002", 100) as never,
      scopes: ["kb:read", "billing:read", "risk:read"],
    });
    const done = await waitForSession(suite.orch.api, session!.sessionId);
    expect(done.stopReason).toBe("permission_denied");
    expect(done.answer).toMatch(/billing:refund/);
    expect((await refundsOf(suite.tools, "ord_DEMO00000002")).length).toBe(before);
  });

  it("deadline: a slow tool and a short wall clock stop the session with deadline", async () => {
    const token = await testToken({ subject: "drill", audience: "kb-search", scopes: ["tool:admin"] });
    const admin = createRawClient(ToolAdminService, suite.tools.kb.address, { token });
    await admin.setFaults({ profile: { addedLatencyMs: 3000, methods: ["Search"] } });
    try {
      const started = Date.now();
      const s = await start("How do refunds work?", {}, { budget: { maxWallClockMs: 800 } });
      const done = await waitForSession(suite.orch.api, s.sessionId);
      expect(done.stopReason).toBe("deadline");
      expect(Date.now() - started).toBeLessThan(2500);
    } finally {
      await admin.setFaults({ profile: {} });
      admin.close();
    }
  });

  it("cancelled: CancelSession ends a running session", async () => {
    const s = await start("Refund", refundTask("ord_DEMO00000008", 1000, HIGH_RISK));
    await waitForSession(suite.orch.api, s.sessionId, (x) => x.state === SessionState.AWAITING_APPROVAL);
    const cancelled = (await suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "duplicate ticket" }))
      .session!;
    expect(cancelled.stopReason).toBe("cancelled");
    const again = await suite.orch.api.cancelSession({ sessionId: s.sessionId, reason: "" });
    expect(again.session?.stopReason).toBe("cancelled");
  });

  it("WatchSession streams every transition until the session ends", async () => {
    const s = await start("How do refunds work?", {});
    const seen: string[] = [];
    for await (const event of suite.orch.api.watchSession({ sessionId: s.sessionId })) {
      if (event.event.case === "transition") seen.push(SessionState[event.event.value.to]);
    }
    expect(seen[0]).toBe("THINKING");
    expect(seen).toContain("TOOL_EXECUTING");
    expect(seen.at(-1)).toBe("DONE");
  });

  it("GetSession of an unknown id is NOT_FOUND", async () => {
    const error = await refusal(suite.orch.api.getSession({ sessionId: "ses_doesnotexist" }), CallError);
    expect(error.code).toBe(status.NOT_FOUND);
    expect(error.reason).toBe("SESSION_NOT_FOUND");
  });
});
