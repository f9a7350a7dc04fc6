// The orchestrator's HTTP port through real HTTP: its Connect API as curl or the dashboard calls
// it (JSON), the dashboard's files, and what a caller of the removed /api routes is told. The
// in-process orchestrator from the harness (real gRPC server, real SQLite store, the HTTP port
// serveTool opens) drives sessions against the three tools as real processes.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { createRawClient, mintToken, newKeyPair, type SigningKey, signingKeyFromJwk } from "@loopguard/tool-sdk";
import { SESSION_OPERATOR_SCOPES, testPersonKey } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_BUDGET } from "../src/guard/budget.js";
import {
  ALL_SCOPES,
  HIGH_RISK_REFUND,
  startOrchestrator,
  startTools,
  type TestOrchestrator,
  type Tools,
} from "./harness.js";

let tools: Tools;
let orch: TestOrchestrator;
let operator: string;
/** A second person: approvals must come from someone other than the session's creator. */
let approverToken: string;

beforeAll(async () => {
  tools = await startTools();
  orch = await startOrchestrator(tools, { APPROVAL_TTL_MS: "60000" });
  operator = await token([...SESSION_OPERATOR_SCOPES, "approvals:write"]);
  approverToken = await token(["sessions:read", "approvals:write"], undefined, "ops:alice");
});
afterAll(async () => {
  await orch?.close();
  await tools?.stop();
});

function token(scopes: string[], key?: SigningKey, subject = "ops:test"): Promise<string> {
  return mintToken(key ?? testPersonKey(subject), { subject, audience: "orchestrator", scopes, ttlSeconds: 600 });
}

interface Reply {
  status: number;
  headers: Headers;
  json: any;
  text: string;
}

async function call(
  path: string,
  init: { method?: string; token?: string | null; body?: unknown; rawBody?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = {};
  const bearer = init.token === undefined ? operator : init.token;
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  let body: string | undefined = init.rawBody;
  if (init.body !== undefined) body = JSON.stringify(init.body);
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${orch.httpUrl}${path}`, {
    method: init.method ?? (body === undefined ? "GET" : "POST"),
    headers,
    body,
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, json, text };
}

/** One orchestrator.v1 method over Connect, as curl or the dashboard calls it. */
const rpc = (method: string, request: unknown, init: { token?: string | null; rawBody?: string } = {}) =>
  call(`/${OrchestratorService.typeName}/${method}`, init.rawBody === undefined ? { ...init, body: request } : init);

/** A Connect error's google.rpc detail of that type (its JSON in `debug`). */
const detail = (r: Reply, type: string) =>
  (r.json.details as { type: string; debug: any }[]).find((d) => d.type === `google.rpc.${type}`)?.debug;
const reasonOf = (r: Reply): string | undefined => detail(r, "ErrorInfo")?.reason;
const violatedFields = (r: Reply): string[] =>
  detail(r, "BadRequest").fieldViolations.map((v: { field: string }) => v.field);

async function start(goal: string, task: Record<string, unknown>): Promise<string> {
  const r = await rpc("StartSession", { goal, task, scopes: ALL_SCOPES, policy: "scripted" });
  expect([r.status, r.json.created]).toEqual([200, true]);
  return r.json.session.sessionId as string;
}

async function waitFor(
  id: string,
  until: (detail: Reply["json"]) => boolean,
  timeoutMs = 20_000,
): Promise<Reply["json"]> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const r = await rpc("GetSessionDetail", { sessionId: id });
    expect(r.status).toBe(200);
    if (until(r.json)) return r.json;
    if (Date.now() > end) throw new Error(`session ${id} stuck in ${r.json.session.state}`);
    await sleep(50);
  }
}

const stateIs = (state: string) => (d: Reply["json"]) => d.session.state === `SESSION_STATE_${state}`;

describe("authentication and scopes", () => {
  it("refuses a request without a token with 401, WWW-Authenticate and the reason", async () => {
    const r = await rpc("GetOverview", {}, { token: null });
    expect(r.status).toBe(401);
    expect(r.headers.get("www-authenticate")).toBe("Bearer");
    expect([r.json.code, reasonOf(r)]).toEqual(["unauthenticated", "CREDENTIALS_INVALID"]);
  });

  it("refuses a token signed with another secret with 401", async () => {
    const forged = await token(["sessions:read"], signingKeyFromJwk(newKeyPair("test-people").privateJwk));
    const r = await rpc("ListSessions", {}, { token: forged });
    expect(r.status).toBe(401);
    expect(r.text).not.toMatch(/at .*\.(ts|js):\d+/);
  });

  it("refuses a read without sessions:read with 403", async () => {
    const r = await rpc("ListToolStats", {}, { token: await token(["approvals:write"]) });
    expect(r.status).toBe(403);
    expect([r.json.code, reasonOf(r)]).toEqual(["permission_denied", "SCOPE_MISSING"]);
    expect(r.json.message).toContain("sessions:read");
  });

  it("refuses to start a session with a read-only token with 403, and creates nothing", async () => {
    const before = (await rpc("GetOverview", {})).json.total;
    const r = await rpc(
      "StartSession",
      { goal: "Should not run", scopes: ALL_SCOPES },
      { token: await token(["sessions:read"]) },
    );
    expect(r.status).toBe(403);
    expect(r.json.message).toContain("sessions:write");
    expect((await rpc("GetOverview", {})).json.total).toBe(before);
  });

  it("refuses to give a session a scope the caller may not grant with 403 naming it, and creates nothing", async () => {
    const before = (await rpc("GetOverview", {})).json.total;
    const r = await rpc(
      "StartSession",
      { goal: "Refund it", scopes: ["kb:read", "billing:refund"] },
      { token: await token(["sessions:read", "sessions:write", "grant:kb:read"]) },
    );
    expect(r.status).toBe(403);
    expect([r.json.code, reasonOf(r)]).toEqual(["permission_denied", "SCOPE_NOT_GRANTABLE"]);
    expect(r.json.message).toContain("billing:refund");
    expect((await rpc("GetOverview", {})).json.total).toBe(before);
  });

  it("refuses approve without approvals:write with 403", async () => {
    const r = await rpc(
      "ResolveApproval",
      { sessionId: "ses_whatever", approve: true },
      { token: await token(["sessions:read", "sessions:write"]) },
    );
    expect(r.status).toBe(403);
    expect(r.json.message).toContain("approvals:write");
  });
});

describe("sessions through the Connect API", () => {
  it("a question started over HTTP reaches DONE; its page shows timeline, tool results with served_from, trace id, budget and log lines", async () => {
    const id = await start("How long do card refunds take?", {});
    const detail = await waitFor(id, stateIs("DONE"));
    expect(detail.session).toMatchObject({ sessionId: id, stopReason: "done", policy: "scripted" });
    expect(detail.session.answer).not.toBe("");
    expect(detail.session.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(detail.transitions[0]).toMatchObject({
      version: 1,
      from: "IDLE",
      to: "THINKING",
      reason: "session started",
    });
    // The start is stored with the first decision, in one commit: both rows carry its time.
    expect(detail.transitions[1]).toMatchObject({
      version: 2,
      from: "THINKING",
      to: "TOOL_EXECUTING",
      at: detail.transitions[0].at,
    });
    expect(detail.transitions.at(-1)).toMatchObject({ to: "DONE" });
    const toolCalls = detail.steps.filter(
      (s: { record: { decision: { kind: string } } }) => s.record.decision.kind === "tool_call",
    );
    expect(toolCalls.length).toBeGreaterThan(0);
    expect(toolCalls[0].record.decision.name).toBe("kb_search_search");
    expect(["live", "cache", "degraded"]).toContain(toolCalls[0].record.decision.served_from);
    const steps = detail.budget.find((b: { name: string }) => b.name === "steps");
    expect(steps).toEqual({
      name: "steps",
      used: detail.session.usage.steps,
      limit: DEFAULT_BUDGET.maxSteps,
      left: DEFAULT_BUDGET.maxSteps - detail.session.usage.steps,
    });
    // The "session ended" line is written just after the last transition.
    const withLog = await waitFor(id, (d) => d.logs.some((l: { msg: string }) => l.msg === "session ended"), 2000);
    expect(withLog.logs.find((l: { msg: string }) => l.msg === "session ended")).toMatchObject({
      session_id: id,
      state: "DONE",
    });
  });

  it("lists the session with the same fields as the gRPC API's Session", async () => {
    const id = await start("What is the refund policy?", {});
    const api = createRawClient(OrchestratorService, orch.server.address, { token: operator });
    const grpc = (await api.getSession({ sessionId: id }).finally(() => api.close())).session!;
    const listed = (await rpc("ListSessions", { pageSize: 200 })).json.sessions.find(
      (s: { sessionId: string }) => s.sessionId === id,
    );
    expect(listed).toMatchObject({
      sessionId: grpc.sessionId,
      goal: grpc.goal,
      traceId: grpc.traceId,
      policy: grpc.policy,
      scopes: grpc.scopes,
    });
    expect(Object.keys(listed)).toEqual(
      expect.arrayContaining(["state", "stopReason", "usage", "budget", "healthScore", "updatedAt"]),
    );
  });

  it("a high-risk refund waits in the approval queue with redacted arguments; approve runs it to DONE; a second approve is refused as for an unknown session", async () => {
    const id = await start("Refund 10.00 of ord_DEMO00000008", HIGH_RISK_REFUND);
    await waitFor(id, stateIs("AWAITING_APPROVAL"));
    const queue = await rpc("ListApprovals", {});
    expect(queue.status).toBe(200);
    const waiting = queue.json.approvals.find((s: { sessionId: string }) => s.sessionId === id);
    expect(waiting.pendingApproval).toMatchObject({ tool: "billing_refund" });
    expect(waiting.pendingApproval.reason).toMatch(/risk score/);
    expect(JSON.stringify(queue.json)).not.toContain(HIGH_RISK_REFUND.id_card);
    expect(JSON.stringify(queue.json)).not.toContain(HIGH_RISK_REFUND.phone);

    const shown = {
      sessionId: id,
      approve: true,
      approvalId: waiting.pendingApproval.approvalId,
      argumentsHash: waiting.pendingApproval.argumentsHash,
    };
    const own = await rpc("ResolveApproval", { ...shown, reason: "I started it" });
    expect(own.status).toBe(403);
    expect([own.json.code, reasonOf(own)]).toEqual(["permission_denied", "SELF_APPROVAL"]);
    const stale = await rpc("ResolveApproval", { ...shown, argumentsHash: "0".repeat(32) }, { token: approverToken });
    expect([stale.status, stale.json.code, reasonOf(stale)]).toEqual([400, "failed_precondition", "APPROVAL_MISMATCH"]);
    const unnamed = await rpc("ResolveApproval", { sessionId: id, approve: true }, { token: approverToken });
    expect([unnamed.status, unnamed.json.code]).toEqual([400, "invalid_argument"]);
    expect(violatedFields(unnamed).sort()).toEqual(["approval_id", "arguments_hash"]);

    const approved = await rpc("ResolveApproval", { ...shown, reason: "checked the photos" }, { token: approverToken });
    expect(approved.status).toBe(200);
    expect(approved.json.session.state).toBe("SESSION_STATE_TOOL_EXECUTING");
    const done = await waitFor(id, stateIs("DONE"));
    expect(done.session.answer).toMatch(/rf_[A-Za-z0-9]{16}/);
    expect(
      done.transitions.some((t: { reason: string }) => t.reason === "approved by ops:alice: checked the photos"),
    ).toBe(true);
    expect(
      (await rpc("ListApprovals", {})).json.approvals.map((s: { sessionId: string }) => s.sessionId),
    ).not.toContain(id);

    const again = await rpc("ResolveApproval", shown, { token: approverToken });
    // Done, it is no longer the approver's to see: as for an unknown id.
    expect([again.status, again.json.code, reasonOf(again)]).toEqual([404, "not_found", "SESSION_NOT_FOUND"]);
  });

  it("deny ends a waiting session FAILED with approval_denied, recording the approver from the token", async () => {
    const id = await start("Refund 10.00 of ord_DEMO00000008 again", HIGH_RISK_REFUND);
    const waiting = (await waitFor(id, stateIs("AWAITING_APPROVAL"))).session;
    const denied = await rpc(
      "ResolveApproval",
      {
        sessionId: id,
        approve: false,
        approvalId: waiting.pendingApproval.approvalId,
        argumentsHash: waiting.pendingApproval.argumentsHash,
        reason: "duplicate claim",
      },
      { token: approverToken },
    );
    expect(denied.status).toBe(200);
    expect(denied.json.session).toMatchObject({ state: "SESSION_STATE_FAILED", stopReason: "approval_denied" });
    const detail = await waitFor(id, stateIs("FAILED"));
    expect(detail.transitions.at(-1).reason).toMatch(/^approval_denied: .*denied by ops:alice: duplicate claim/);
  });

  it("cancel ends a waiting session CANCELLED; an approver's deny after it ended is refused as for an unknown session", async () => {
    const id = await start("Refund to cancel", HIGH_RISK_REFUND);
    await waitFor(id, stateIs("AWAITING_APPROVAL"));
    const cancelled = await rpc("CancelSession", { sessionId: id, reason: "customer withdrew" });
    expect(cancelled.status).toBe(200);
    expect(cancelled.json.session).toMatchObject({ state: "SESSION_STATE_CANCELLED", stopReason: "cancelled" });
    const late = await rpc(
      "ResolveApproval",
      { sessionId: id, approve: false, approvalId: "apr_x", argumentsHash: "h" },
      { token: approverToken },
    );
    // Ended, it is no longer the approver's to see: as for an unknown id.
    expect([late.status, late.json.code, reasonOf(late)]).toEqual([404, "not_found", "SESSION_NOT_FOUND"]);
  });

  it("answers 404 for an unknown session, on read and on approve", async () => {
    const read = await rpc("GetSessionDetail", { sessionId: "ses_doesnotexist" });
    expect([read.status, read.json.code, reasonOf(read)]).toEqual([404, "not_found", "SESSION_NOT_FOUND"]);
    const approve = await rpc("ResolveApproval", {
      sessionId: "ses_doesnotexist",
      approve: true,
      approvalId: "apr_x",
      argumentsHash: "h",
    });
    expect(approve.status).toBe(404);
  });

  it("the overview counts sessions by state, and the tools panel reports every tool with a closed breaker and its latency", async () => {
    const overview = await rpc("GetOverview", {});
    expect(overview.status).toBe(200);
    const counts = overview.json.counts as Record<string, number>;
    expect(Object.values(counts).reduce((a, b) => a + b, 0)).toBe(overview.json.total);
    expect(counts.DONE).toBeGreaterThanOrEqual(2);
    expect(overview.json.approvalsWaiting).toBe(counts.AWAITING_APPROVAL);

    const { tools: stats } = (await rpc("ListToolStats", {})).json;
    expect(stats.map((t: { tool: string }) => t.tool).sort()).toEqual(["billing", "kb-search", "risk"]);
    for (const t of stats) expect(t.breaker).toBe("closed");
    const kb = stats.find((t: { tool: string }) => t.tool === "kb-search");
    expect(kb.calls).toBeGreaterThan(0);
    expect(kb.errorRate).toBeCloseTo((kb.calls - (kb.outcomes.ok ?? 0)) / kb.calls);
    expect(kb.fallbacksServed).toBe((kb.outcomes.fallback_cache ?? 0) + (kb.outcomes.fallback_degraded ?? 0));
    expect(kb.p95Ms).toBeGreaterThan(0);
    const billing = stats.find((t: { tool: string }) => t.tool === "billing");
    expect(billing.outcomes.ok).toBeGreaterThan(0);
  });

  it("the dashboard's views are orchestrator.v1 methods, counted in the RPC metrics", async () => {
    const id = await start("How long do card refunds take?", {});
    await waitFor(id, stateIs("DONE"));
    const overview = await rpc("GetOverview", {});
    expect(overview.json.total).toBe(
      Object.values(overview.json.counts as Record<string, number>).reduce((a, b) => a + b, 0),
    );
    const metrics = await (await fetch(`${orch.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(
      /grpc_server_handled_total\{[^}]*grpc_method="GetSessionDetail"[^}]*grpc_code="OK"[^}]*\} [1-9]/,
    );
  });

  it("a refusal is a Connect error with its code, message and google.rpc details", async () => {
    const invalid = await rpc("GetSessionDetail", { sessionId: "" });
    expect([invalid.status, invalid.json.code]).toEqual([400, "invalid_argument"]);
    expect(violatedFields(invalid)).toEqual(["session_id"]);
    const missing = await rpc("GetSessionDetail", { sessionId: "ses_doesnotexist" });
    expect(detail(missing, "ErrorInfo")).toMatchObject({
      reason: "SESSION_NOT_FOUND",
      domain: "orchestrator.loopguard.dev",
    });
  });
});

describe("bad input", () => {
  it("a body that is not JSON is refused with 400 naming the problem, without quoting the body", async () => {
    const r = await rpc("StartSession", undefined, { rawBody: '{"goal": call (139)12345678}' });
    expect([r.status, r.json.code, reasonOf(r)]).toEqual([400, "invalid_argument", "REQUEST_INVALID"]);
    expect(r.json.message).toBe(
      "the request is not a StartSessionRequest: the body is not valid JSON (Unexpected token 'c')",
    );
    expect(r.text).not.toMatch(/12345678|at .*\.(ts|js):\d+/);
  });

  it("a JSON array body is refused with 400", async () => {
    const r = await rpc("StartSession", undefined, { rawBody: "[1,2]" });
    expect(r.status).toBe(400);
    expect(r.json.message).toMatch(/must be a JSON object/);
  });

  it("an invalid StartSession is refused with 400 and the contract's field violations", async () => {
    const r = await rpc("StartSession", { goal: "", scopes: ["not a scope"], policy: "magic" });
    expect(r.status).toBe(400);
    expect(violatedFields(r).sort()).toEqual(["goal", "policy", "scopes[0]"]);
  });

  it("an unknown field or a wrongly typed one is refused with 400 naming it, and starts nothing", async () => {
    const before = (await rpc("GetOverview", {})).json.total;
    const unknown = await rpc("StartSession", { goal: "x", scopes: ["kb:read"], colour: "red" });
    expect([unknown.status, unknown.json.code, reasonOf(unknown)]).toEqual([
      400,
      "invalid_argument",
      "REQUEST_INVALID",
    ]);
    expect(unknown.json.message).toBe(
      "the request is not a StartSessionRequest: colour is not a field of StartSessionRequest",
    );
    expect(violatedFields(unknown)).toEqual(["colour"]);
    expect((await rpc("StartSession", { goal: "x", task: "not an object" })).status).toBe(400);
    expect(detail(await rpc("ResolveApproval", { sessionId: "ses_x", approver: 42 }), "BadRequest")).toEqual({
      fieldViolations: [{ field: "approver", description: "must be a string", reason: "" }],
    });
    expect((await rpc("GetOverview", {})).json.total).toBe(before);
  });

  it("list parameters out of range are refused with 400", async () => {
    for (const request of [
      { pageSize: 501 },
      { pageSize: "abc" },
      { state: "SLEEPING" },
      { pageToken: "bm90LWEtY3Vyc29y" },
    ]) {
      const r = await rpc("ListSessions", request);
      expect([r.status, r.json.code], JSON.stringify(request)).toEqual([400, "invalid_argument"]);
    }
  });

  it("a removed /api route is a JSON 404 naming the Connect method that replaced it; a write method refuses GET", async () => {
    const removed = await call("/api/sessions/ses_x/approve", { body: { approvalId: "apr_x" } });
    expect([removed.status, removed.json.code, removed.json.replacedBy]).toEqual([
      404,
      "not_found",
      "loopguard.orchestrator.v1.OrchestratorService.ResolveApproval",
    ]);
    expect(removed.json.message).toBe(
      "POST /api/sessions/ses_x/approve was removed: POST /loopguard.orchestrator.v1.OrchestratorService/ResolveApproval instead (Connect, JSON body)",
    );
    expect((await call("/api/sessions")).json.replacedBy).toBe(
      "loopguard.orchestrator.v1.OrchestratorService.ListSessions",
    );
    const unknown = await call("/api/nothing-here");
    expect([unknown.status, unknown.json.replacedBy]).toEqual([404, undefined]);
    // Anyone may ask: a phone in the path is not echoed.
    const phone = await call("/api/sessions/13912345678", { method: "GET" });
    expect([phone.status, phone.json.message]).toEqual([
      404,
      "GET /api/sessions/[redacted] was removed: POST /loopguard.orchestrator.v1.OrchestratorService/GetSessionDetail instead (Connect, JSON body)",
    ]);
    expect((await call(`/${OrchestratorService.typeName}/StartSession`, { method: "GET" })).status).toBe(405);
    const streaming = await call(`/${OrchestratorService.typeName}/WatchSession`, { body: { sessionId: "ses_x" } });
    expect([streaming.status, streaming.json]).toEqual([
      404,
      {
        code: "unimplemented",
        message: `${OrchestratorService.typeName}/WatchSession is not served over Connect: it streams; call it over gRPC`,
      },
    ]);
  });

  it("the dashboard page and its assets are served with a strict content security policy; /metrics still works", async () => {
    const page = await fetch(`${orch.httpUrl}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/text\/html/);
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(await page.text()).toContain('data-testid="sessions-table"');
    expect((await fetch(`${orch.httpUrl}/app.js`)).headers.get("content-type")).toMatch(/javascript/);
    expect((await fetch(`${orch.httpUrl}/../package.json`)).status).toBe(404);
    const metrics = await (await fetch(`${orch.httpUrl}/metrics`)).text();
    expect(metrics).toContain("grpc_client_handling_seconds_bucket");
    // The series that name a tool exist before any session needs them (SessionMetrics.knowTools).
    expect(metrics).toMatch(
      /^loopguard_session_outcomes_total\{outcome="not_done",reason="effect_unknown: billing_refund"[^}]*\} \d+$/m,
    );
    expect(metrics).toMatch(
      /^loopguard_session_tool_results_total\{tool="kb_search_search",outcome="ok",served_from="degraded"[^}]*\} \d+$/m,
    );
  });
});

describe("pagination over 1,000 sessions", () => {
  it("pages of the list neither repeat nor miss a session, and the first page answers in under 500 ms", async () => {
    // Stop driving first, so the inserted sessions stay where they are while the pages are read.
    await orch.orchestrator.stop();
    const inserted = new Set<string>();
    for (let i = 0; i < 1000; i += 1) {
      const id = `ses_bulk${String(i).padStart(6, "0")}${randomBytes(4).toString("hex")}`;
      await orch.orchestrator.store.create({
        id,
        goal: `bulk session ${i}`,
        task: {},
        budget: DEFAULT_BUDGET,
        scopes: ["kb:read"],
        policy: "scripted",
        createdBy: "ops:test",
      });
      inserted.add(id);
    }
    const total = (await rpc("GetOverview", {})).json.total as number;
    expect(total).toBeGreaterThanOrEqual(1000);

    const started = performance.now();
    const first = await rpc("ListSessions", { pageSize: 50 });
    const elapsed = performance.now() - started;
    expect(first.status).toBe(200);
    expect(first.json.sessions).toHaveLength(50);
    expect(elapsed).toBeLessThan(500);

    for (const [filter, expected, pageSize] of [
      ["", total, 200],
      ["IDLE", 1000, 50],
    ] as const) {
      const seen: string[] = [];
      let pageToken = "";
      let pages = 0;
      do {
        const request = { pageSize, pageToken, ...(filter ? { state: `SESSION_STATE_${filter}` } : {}) };
        const page = await rpc("ListSessions", request);
        expect(page.status).toBe(200);
        expect(page.json.sessions.length).toBeLessThanOrEqual(pageSize);
        seen.push(...page.json.sessions.map((s: { sessionId: string }) => s.sessionId));
        pageToken = page.json.nextPageToken;
        pages += 1;
        expect(pages).toBeLessThan(100);
      } while (pageToken !== "");
      expect(new Set(seen).size, `duplicates with state=${filter}`).toBe(seen.length);
      expect(seen.length).toBe(expected);
      const seenSet = new Set(seen);
      expect([...inserted].filter((id) => !seenSet.has(id))).toEqual([]);
    }
  });
});
