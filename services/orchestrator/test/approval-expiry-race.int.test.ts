// An approver's answer and the expiry sweep both writing one session at the moment its approval
// expires: whichever write lands first decides, the other changes nothing, and the approver is
// told which. The two writes are made to meet on the store in a chosen order: the store of the
// running orchestrator holds each write of the session out of AWAITING_APPROVAL until the other
// has arrived or landed (a real store, SQLite and PostgreSQL; real tool processes; the sweep on
// its own timer, the approval on the real clock).
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import { type CallError, status } from "@loopguard/tool-sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type SessionStore, StaleTransitionError, type TransitionInput } from "../src/store/session-store.js";
import {
  ALL_SCOPES,
  decisionOn,
  HIGH_RISK_REFUND,
  refundsOf,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const suite = useSuite({ orchestrator: false });

/** Short enough to wait out in a test, long enough for the answer to be read before it expires. */
const TTL_MS = 4000;
const ORDER = HIGH_RISK_REFUND.order_id;

type Writer = "answer" | "sweep";
type Landed = "committed" | "stale";

interface Signal<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
}

function signal<T = void>(): Signal<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** `promise`, or an error naming what never happened within 20 s (the test then fails instead of hanging). */
function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within 20 s`)), 20_000);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/**
 * Makes the two writes of session `id` out of AWAITING_APPROVAL meet in `first`'s favour: the
 * other is held until the first has arrived, then sent after it landed ("answer" first: the
 * answer, read before the expiry, waits until the sweep has read the session as expired too).
 * Returns how each write ended on the store.
 */
function meet(store: SessionStore, id: string, first: Writer): Record<Writer, Promise<Landed>> {
  const real = store.transition.bind(store);
  const arrived = { answer: signal(), sweep: signal() };
  const landed = { answer: signal<Landed>(), sweep: signal<Landed>() };
  const second: Writer = first === "answer" ? "sweep" : "answer";
  const gate: Record<Writer, () => Promise<unknown>> = {
    [first]: () => within(arrived[second].promise, `the ${second}'s write`),
    [second]: () => within(landed[first].promise, `the ${first}'s write landing`),
  } as Record<Writer, () => Promise<unknown>>;
  store.transition = async (t: TransitionInput) => {
    if (t.id !== id || t.from !== "AWAITING_APPROVAL") return real(t);
    const who: Writer = String(t.patch?.answer ?? "").includes("expired unanswered") ? "sweep" : "answer";
    arrived[who].resolve();
    await gate[who]();
    try {
      const moved = await real(t);
      landed[who].resolve("committed");
      return moved;
    } catch (error) {
      landed[who].resolve(error instanceof StaleTransitionError ? "stale" : "committed");
      throw error;
    }
  };
  return { answer: landed.answer.promise, sweep: landed.sweep.promise };
}

async function waitingRefund(orch: TestOrchestrator): Promise<Session> {
  const { session } = await orch.api.startSession({
    goal: "Refund 10.00 of ord_DEMO00000008",
    task: HIGH_RISK_REFUND as never,
    scopes: ALL_SCOPES,
    policy: "scripted",
  });
  return waitForSession(orch.api, session!.sessionId, (s) => s.state === SessionState.AWAITING_APPROVAL);
}

/** The session's audit trail: versions without gaps up to the session's, and its one move out of AWAITING_APPROVAL. */
async function leftWaiting(orch: TestOrchestrator, s: Session) {
  const trail = await orch.orchestrator.store.auditTrail(s.sessionId);
  expect(trail.map((t) => t.version)).toEqual(trail.map((_, i) => i + 1));
  expect(trail.at(-1)!.version).toBe(Number(s.version));
  const out = trail.filter((t) => t.from === "AWAITING_APPROVAL");
  expect(out).toHaveLength(1);
  return out[0]!;
}

/** One session, its approval answered `approve` and the sweep ending it, their writes meeting with `first` landing first. */
async function race(env: Record<string, string>, first: Writer, approve: boolean) {
  const orch = await suite.startOrchestrator({
    APPROVAL_TTL_MS: String(TTL_MS),
    ORCHESTRATOR_APPROVAL_SWEEP_MS: "50",
    ...env,
  });
  const before = (await refundsOf(suite.tools, ORDER)).length;
  const waiting = await waitingRefund(orch);
  const shown = waiting.pendingApproval!;
  const landed = meet(orch.orchestrator.store, waiting.sessionId, first);
  const answered = await orch.approver.resolveApproval(decisionOn(waiting.sessionId, shown, approve, "checked")).then(
    () => "applied",
    (error: CallError) => `${error.code} ${error.reason}`,
  );
  const writes = {
    answer: await within(landed.answer, "the answer's write landing"),
    sweep: await within(landed.sweep, "the sweep's write landing"),
  };
  const ended = await waitForSession(orch.api, waiting.sessionId);
  return {
    orch,
    shown,
    answered,
    writes,
    ended,
    out: await leftWaiting(orch, ended),
    refunds: (await refundsOf(suite.tools, ORDER)).length - before,
    reservations: await orch.orchestrator.store.reservations(waiting.sessionId),
  };
}

/** The sweep landed first: the session ended expired unanswered, the answer was told so, nothing was held or made. */
async function sweepFirst(env: Record<string, string>, approve: boolean) {
  const r = await race(env, "sweep", approve);
  expect(r.writes).toEqual({ sweep: "committed", answer: "stale" });
  expect(r.answered).toBe(`${status.FAILED_PRECONDITION} APPROVAL_EXPIRED`);
  expect([SessionState[r.ended.state], r.ended.stopReason, r.ended.answer]).toEqual([
    "FAILED",
    "approval_denied",
    `approval ${r.shown.approvalId} expired unanswered`,
  ]);
  expect([r.out.to, r.out.reason]).toEqual(["FAILED", `approval_denied: ${r.ended.answer}`]);
  // An approval's move holds the refund's amount in its own transaction: it rolled back with the move.
  expect([r.refunds, r.reservations]).toEqual([0, []]);
}

/** The answer landed first: it was applied, and the sweep's write changed nothing and failed nothing. */
async function answerFirst(env: Record<string, string>, approve: boolean) {
  const r = await race(env, "answer", approve);
  expect(r.writes).toEqual({ answer: "committed", sweep: "stale" });
  expect(r.answered).toBe("applied");
  if (approve) {
    expect([SessionState[r.ended.state], r.ended.stopReason]).toEqual(["DONE", "done"]);
    expect([r.out.to, r.out.outcome]).toEqual(["TOOL_EXECUTING", "approved"]);
    expect([r.refunds, r.reservations.map((h) => h.status)]).toEqual([1, ["settled"]]);
  } else {
    expect([SessionState[r.ended.state], r.ended.stopReason]).toEqual(["FAILED", "approval_denied"]);
    expect(r.ended.answer).toMatch(/^billing_refund was not approved \(denied by test-approver: checked\)/);
    expect([r.refunds, r.reservations]).toEqual([0, []]);
  }
  expect(r.orch.logs.filter((l) => l.includes("approval sweep failed"))).toEqual([]);
}

describe("an approval answered as it expires, one orchestrator on SQLite", () => {
  it.each([true, false])(
    "the sweep's write lands first (approve: %s): APPROVAL_EXPIRED, nothing held or made",
    (approve) => sweepFirst({}, approve),
  );
  it.each([true, false])("the answer's write lands first (approve: %s): applied, the sweep idle", (approve) =>
    answerFirst({}, approve),
  );
});

const postgres = testPostgres("approval-expiry-race");
describe.skipIf(postgres.skip)("an approval answered as it expires, on PostgreSQL", () => {
  beforeAll(postgres.start, 120_000);
  afterAll(postgres.stop, 60_000);

  it("the sweep's write lands first: APPROVAL_EXPIRED, the refund's hold rolled back with the approval's move", async () =>
    sweepFirst({ ORCHESTRATOR_STORE: await postgres.freshDatabase() }, true));
  it("the answer's write lands first: the refund made once, the sweep idle", async () =>
    answerFirst({ ORCHESTRATOR_STORE: await postgres.freshDatabase() }, true));
});
