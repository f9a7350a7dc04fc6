// Two replicas on one PostgreSQL, one whose clock runs ten minutes ahead: the times they share (an approval's
// expiry, a session's start and so its wall-clock deadline) are on the database's clock, so the replica ahead
// neither expires the approval the other one asked for nor stops the session on its wall clock when it runs it.
// A replica shows a live session's wall clock on that same clock, as its budget counts it: a test cannot move a
// process's own clock, so one on SQLite (whose clock is the store's) is given a clock ahead of the test's. A
// tool call is timed by this process's clock (the client's, grpc-js's, its token's expiry), so a replica
// whose store's clock runs behind it still gives each call its whole timeout.
import { setTimeout as sleep } from "node:timers/promises";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  decisionOn,
  HIGH_RISK_CUSTOMER,
  startOrchestrator,
  startRefund,
  startTools,
  type TestOrchestrator,
  type Tools,
  waitForSession,
} from "./harness.js";

const ORDER = "ord_DEMO00000008";
const AHEAD_MS = 10 * 60_000;
/** More than any tool's SLA timeout (1–2 s). */
const BEHIND_MS = 5000;
const ENV = { APPROVAL_TTL_MS: "300000", ORCHESTRATOR_APPROVAL_SWEEP_MS: "100" };

const waiting = (s: Session) => s.state === SessionState.AWAITING_APPROVAL;

/** A live session's wall clock as each view of `o` shows it, in milliseconds. */
async function wallClocksShown(o: TestOrchestrator, id: string): Promise<Record<string, number | undefined>> {
  const stream = o.api.watchSession({ sessionId: id })[Symbol.asyncIterator]();
  const first = (await stream.next()).value;
  await stream.return?.();
  const listed = (await o.api.listSessions({})).sessions.find((s) => s.sessionId === id);
  const queued = (await o.api.listApprovals({})).approvals.find((s) => s.sessionId === id);
  const detail = await o.api.getSessionDetail({ sessionId: id });
  return {
    getSession: (await o.api.getSession({ sessionId: id })).session?.usage?.wallClockMs,
    listSessions: listed?.usage?.wallClockMs,
    listApprovals: queued?.usage?.wallClockMs,
    watchSession: first?.event.case === "snapshot" ? first.event.value.usage?.wallClockMs : undefined,
    getSessionDetail: detail.session?.usage?.wallClockMs,
    getSessionDetailBudget: Number(detail.budget.find((row) => row.name === "wall_clock_ms")?.used),
  };
}

/** The replica's `loopguard_approvals_overdue` gauge, as /metrics serves it. */
async function overdueApprovals(o: TestOrchestrator): Promise<number> {
  const text = await (await fetch(`${o.httpUrl}/metrics`)).text();
  return Number(/^loopguard_approvals_overdue\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
}

const postgres = testPostgres("skewed-clocks");
describe.skipIf(postgres.skip !== null)("two replicas, one whose clock is ten minutes ahead", () => {
  let tools: Tools;
  let a: TestOrchestrator | undefined;
  let ahead: TestOrchestrator;
  beforeAll(async () => {
    await postgres.start();
    const url = await postgres.freshDatabase();
    tools = await startTools();
    a = await startOrchestrator(tools, { ...ENV, ORCHESTRATOR_STORE: url, ORCHESTRATOR_INSTANCE_ID: "replica-a" });
    ahead = await startOrchestrator(
      tools,
      { ...ENV, ORCHESTRATOR_STORE: url, ORCHESTRATOR_INSTANCE_ID: "replica-ahead" },
      { now: () => Date.now() + AHEAD_MS },
    );
  }, 180_000);
  afterAll(async () => {
    await a?.close();
    await ahead?.close();
    await tools?.stop();
    await postgres.stop();
  }, 60_000);

  it("keeps an approval asked on the other replica open, and runs the approved session there to DONE", async () => {
    const id = await startRefund(a!.api, ORDER, 1000, HIGH_RISK_CUSTOMER);
    const shown = (await waitForSession(a!.api, id, waiting)).pendingApproval!;
    // Many of the replica ahead's sweeps: by its own clock the approval expired minutes ago.
    await sleep(1500);
    expect((await ahead.api.getSession({ sessionId: id })).session).toMatchObject({
      state: SessionState.AWAITING_APPROVAL,
      stopReason: "",
    });
    expect(ahead.logs.some((line) => /clock is off the database's by -?\d+ ms/.test(line))).toBe(true);
    // Nor does its gauge page anyone: the approval is not overdue by the database's clock.
    expect(await overdueApprovals(ahead)).toBe(0);

    // The replica ahead alone is left to run it: by its own clock the session's two minutes are long over.
    await a!.close();
    a = undefined;
    const approved = await ahead.approver.resolveApproval(decisionOn(id, shown, true, "checked"));
    expect(approved.session?.state).toBe(SessionState.TOOL_EXECUTING);
    const done = await waitForSession(ahead.api, id);
    expect(done.stopReason).toBe("done");
    expect(done.answer).toMatch(/rf_[A-Za-z0-9]{16}/);
  }, 120_000);
});

describe("replicas on SQLite whose clocks are off this test's: ten minutes ahead, five seconds behind", () => {
  let tools: Tools;
  let ahead: TestOrchestrator;
  let behind: TestOrchestrator;
  beforeAll(async () => {
    tools = await startTools();
    ahead = await startOrchestrator(tools, ENV, { now: () => Date.now() + AHEAD_MS });
    behind = await startOrchestrator(tools, ENV, { now: () => Date.now() - BEHIND_MS });
  }, 60_000);
  afterAll(async () => {
    await ahead?.close();
    await behind?.close();
    await tools?.stop();
  }, 60_000);

  it("gives a tool call its whole timeout by this process's clock when the store's runs seconds behind it", async () => {
    // By the store's clock every call's deadline is BEHIND_MS earlier than by the clock the client,
    // grpc-js and the tools time it by: taken as it is, every call would be past its deadline before it left.
    const { session } = await behind.api.startSession({ goal: "What is the refund policy?", scopes: ["kb:read"] });
    const done = await waitForSession(behind.api, session!.sessionId, undefined, 20_000);
    expect(done.stopReason).toBe("done");
    const trail = await behind.orchestrator.store.auditTrail(session!.sessionId);
    expect(trail.map((a) => a.reason).filter((r) => r !== null && /parked|answered from|DEADLINE/.test(r))).toEqual([]);
    expect(trail.some((a) => a.reason === "observed kb_search_search" && a.outcome === "ok")).toBe(true);
  }, 60_000);

  it("shows a waiting session's wall clock on its store's clock in every view, as its budget counts it", async () => {
    const id = await startRefund(ahead.api, ORDER, 1000, HIGH_RISK_CUSTOMER);
    await waitForSession(ahead.api, id, waiting);
    await sleep(1200);
    // At least the wait, and nowhere near the ten minutes between this process's clock and the store's.
    const shown = Object.entries(await wallClocksShown(ahead, id)).map(([view, ms]) => [
      view,
      ms,
      ms! >= 1200 && ms! < 60_000,
    ]);
    expect(shown).toEqual(shown.map(([view, ms]) => [view, ms, true]));
  }, 60_000);
});
