// Every move of a session goes through one path, so the metrics count each one: a human's cancel,
// approval or deny, and the re-issue of a call a dead replica left in flight, are counted in
// loopguard_session_transitions_total (one per audit row) and a stop in
// loopguard_session_stops_total, with the session's takeovers in loopguard_session_takeovers. Real
// tool processes, a real orchestrator, its real /metrics.
import { join } from "node:path";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { tempDir } from "@loopguard/test-kit";
import { metricValue } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { DEFAULT_BUDGET } from "../src/guard/budget.js";
import { SESSION_STATES, type SessionState as State } from "../src/session/session-state.js";
import { SqliteSessionStore } from "../src/store/sqlite-session-store.js";
import { ALL_SCOPES, decisionOn, HIGH_RISK_CUSTOMER, startRefund, useSuite, waitForSession } from "./harness.js";

const CRASHED = "ses_crashedbeforethecall";
/** Moves the seeding below makes itself, outside any orchestrator: IDLE → THINKING → TOOL_EXECUTING. */
const SEEDED: readonly State[] = ["THINKING", "TOOL_EXECUTING"];

/**
 * A session a replica that died left TOOL_EXECUTING a read-only search, in the store the
 * orchestrator opens; its lease (the dead replica's) has run out, so the claim is a takeover.
 */
async function seedInterruptedCall(file: string): Promise<void> {
  const store = await SqliteSessionStore.open(file);
  const now = Date.now();
  const { session } = await store.create({
    id: CRASHED,
    goal: "What is the refund policy?",
    task: { kind: "question", question: "What is the refund policy?" },
    budget: DEFAULT_BUDGET,
    scopes: ALL_SCOPES,
    policy: "scripted",
    createdBy: "test",
    lease: { owner: "a-dead-replica", ttlMs: 1 },
  });
  const call = {
    id: "call_1",
    tool: "kb_search_search",
    arguments: JSON.stringify({ query: "refund policy" }),
    argsHash: "0".repeat(32),
    worldVersion: "",
  };
  await store.transition({
    id: CRASHED,
    from: "IDLE",
    to: "TOOL_EXECUTING",
    expectedVersion: session.version,
    current: session,
    via: [{ state: "THINKING", audit: { at: now, reason: "session started" } }],
    audit: { at: now, reason: "calling kb_search_search", tool: call.tool, argsHash: call.argsHash },
    patch: { pending: { queue: [], call, startedBy: "run-of-a-dead-replica" } },
  });
  await store.close();
}

async function metrics(): Promise<string> {
  return (await fetch(`${suite.orch.httpUrl}/metrics`)).text();
}

async function awaitingApproval(): Promise<{ id: string; approvalId: string; argumentsHash: string }> {
  const id = await startRefund(suite.orch.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
  const shown = (await waitForSession(suite.orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL))
    .pendingApproval!;
  return { id, approvalId: shown.approvalId, argumentsHash: shown.argumentsHash };
}

const suite = useSuite({
  orchestrator: async () => {
    const storeDir = tempDir("moves");
    suite.onCleanUp(storeDir.remove);
    const file = join(storeDir.dir, "orchestrator.db");
    await seedInterruptedCall(file);
    return { ORCHESTRATOR_STORE: `sqlite:${file}`, APPROVAL_TTL_MS: "60000" };
  },
});

describe("every move of a session is counted", () => {
  type Waiting = Awaited<ReturnType<typeof awaitingApproval>>;
  it.each([
    [
      "a human deny",
      "approval_denied",
      "FAILED",
      (w: Waiting) => suite.orch.approver.resolveApproval(decisionOn(w.id, w, false, "suspicious")),
    ],
    [
      "a cancel",
      "cancelled",
      "CANCELLED",
      (w: Waiting) => suite.orch.api.cancelSession({ sessionId: w.id, reason: "test over" }),
    ],
  ])("%s is counted as a stop for %s and a move to %s", async (_, stopReason, to, decide) => {
    const waiting = await awaitingApproval();
    const before = await metrics();
    await decide(waiting);
    const after = await metrics();
    const counted = (name: string, labels: Record<string, string>) =>
      metricValue(after, name, labels) - metricValue(before, name, labels);
    expect([
      counted("loopguard_session_stops_total", { stop_reason: stopReason }),
      counted("loopguard_session_transitions_total", { to }),
    ]).toEqual([1, 1]);
  });

  it("an approval and the re-issue of an interrupted call are counted: one transition per audit row, by state entered", async () => {
    const waiting = await awaitingApproval();
    await suite.orch.approver.resolveApproval(decisionOn(waiting.id, waiting, true, "verified"));
    const approved = await waitForSession(suite.orch.api, waiting.id);
    expect(approved.stopReason).toBe("done");
    const reissued = await waitForSession(suite.orch.api, CRASHED);
    expect(reissued.stopReason).toBe("done");
    const store = suite.orch.orchestrator.store;
    const trail = await store.auditTrail(CRASHED);
    expect(trail.map((a) => a.reason)).toContain(
      "re-issuing an interrupted call (safe: read-only or same idempotency key)",
    );
    expect((await store.auditTrail(waiting.id)).map((a) => a.outcome)).toContain("approved");
    const rows = new Map<State, number>(SESSION_STATES.map((s) => [s, 0]));
    for (const s of (await store.list({ limit: 100 })).sessions) {
      for (const audit of await store.auditTrail(s.id)) rows.set(audit.to, rows.get(audit.to)! + 1);
    }
    for (const seeded of SEEDED) rows.set(seeded, rows.get(seeded)! - 1);
    const page = await metrics();
    for (const [to, count] of rows)
      expect({ to, count: metricValue(page, "loopguard_session_transitions_total", { to }) }).toEqual({ to, count });
    // The crashed session was taken over once; every other session that ended never was.
    expect((await store.get(CRASHED))?.usage.takeovers).toBe(1);
    const ended = metricValue(page, "loopguard_session_takeovers_count");
    expect(ended).toBeGreaterThanOrEqual(2);
    expect(metricValue(page, "loopguard_session_takeovers_bucket", { le: "0" })).toBe(ended - 1);
    expect(metricValue(page, "loopguard_session_takeovers_bucket", { le: "1" })).toBe(ended);
    expect(metricValue(page, "loopguard_session_takeovers_sum")).toBe(1);
  });
});
