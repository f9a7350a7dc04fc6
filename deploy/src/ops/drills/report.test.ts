import { describe, expect, it } from "vitest";
import { parseDrillArgs } from "./options.js";
import { auditSideEffects, type LedgerRefund } from "./money.js";
import { computeReport, percentile, type ReportInput, type SessionOutcome } from "./report.js";
import { traceFacts } from "./trace-facts.js";

const catalogue = {
  tools: ["kb-search", "billing", "risk"],
  orchestrator: "orchestrator",
  methodsOf: () => ["Search"],
};
const options = parseDrillArgs(["kill-tool", "--tool", "kb-search"], catalogue);

function step(step: number, decision: object, result: object | null = null): string {
  return JSON.stringify({ step, decision, result });
}

const refundStep = (n: number, refundId: string) =>
  step(
    n,
    { kind: "tool_call", name: "billing_refund", served_from: "live" },
    { ok: true, data: { refund: { refundId, orderId: "ord_DEMO00000002" } } },
  );

function outcome(partial: Partial<SessionOutcome> & { records?: string[] }): SessionOutcome {
  const { records, ...rest } = partial;
  return {
    kind: "refund",
    needsApproval: false,
    sessionId: "ses_1",
    state: "DONE",
    stopReason: "done",
    outcome: "succeeded",
    outcomeReason: "",
    answer: "",
    durationMs: 100,
    trace: records ? traceFacts(records) : traceFacts([]),
    ...rest,
  };
}

const ledger = (...ids: string[]): LedgerRefund[] =>
  ids.map((refundId) => ({ refundId, orderId: "ord_DEMO00000002", amountCents: 10 }));

describe("traceFacts", () => {
  it("reads where each answer came from, the refunds observed, accepted answers and repeated steps", () => {
    const facts = traceFacts([
      step(1, { kind: "tool_calls" }),
      step(
        2,
        { kind: "tool_call", name: "kb_search_search", served_from: "cache" },
        { ok: true, ageMs: 840_000, data: { hits: [] } },
      ),
      refundStep(3, "rf_AAAAAAAAAAAAAAAA"),
      step(4, { kind: "tool_call", name: "billing_refund", served_from: "none" }, { ok: false }),
      step(5, { kind: "final", accepted: true }),
      step(5, { kind: "final", accepted: true }),
    ]);
    expect(facts).toEqual({
      servedFrom: ["cache", "live", "none"],
      refundIds: ["rf_AAAAAAAAAAAAAAAA"],
      acceptedAnswers: 2,
      repeatedSteps: 1,
      cacheAgesMs: [840_000],
    });
  });
});

describe("auditSideEffects", () => {
  const answer = (id: string) => `Refunded 10 cents of order ord_DEMO00000002; refund id ${id}.`;

  it("passes when every session's refund is in the ledger once and the ledger holds nothing else of the run", () => {
    const sessions = [
      outcome({
        sessionId: "a",
        answer: answer("rf_AAAAAAAAAAAAAAAA"),
        records: [refundStep(4, "rf_AAAAAAAAAAAAAAAA")],
      }),
      outcome({
        sessionId: "b",
        answer: answer("rf_BBBBBBBBBBBBBBBB"),
        records: [refundStep(4, "rf_BBBBBBBBBBBBBBBB")],
      }),
      outcome({ sessionId: "q", kind: "question", answer: "From the knowledge base: …" }),
    ];
    const audit = auditSideEffects(
      sessions,
      ledger("rf_DEMO000000000005"),
      ledger("rf_DEMO000000000005", "rf_AAAAAAAAAAAAAAAA", "rf_BBBBBBBBBBBBBBBB"),
    );
    expect(audit).toMatchObject({
      refundsInLedger: 2,
      refundsReported: 2,
      duplicate: 0,
      lost: 0,
      unowned: 0,
      doneRefundsExactlyOnce: 2,
      examples: [],
    });
  });

  it("counts a reported refund the ledger lacks as lost", () => {
    const audit = auditSideEffects(
      [
        outcome({
          sessionId: "a",
          answer: answer("rf_AAAAAAAAAAAAAAAA"),
          records: [refundStep(4, "rf_AAAAAAAAAAAAAAAA")],
        }),
      ],
      [],
      [],
    );
    expect(audit.lost).toBe(1);
    expect(audit.doneRefundsExactlyOnce).toBe(0);
    expect(audit.examples[0]).toContain("the ledger does not have");
  });

  it("counts a second refund of one session, a refund claimed twice, and a refund no session owns", () => {
    const sessions = [
      outcome({
        sessionId: "a",
        records: [refundStep(4, "rf_AAAAAAAAAAAAAAAA"), refundStep(6, "rf_CCCCCCCCCCCCCCCC")],
      }),
      outcome({ sessionId: "b", answer: answer("rf_AAAAAAAAAAAAAAAA") }),
    ];
    const audit = auditSideEffects(
      sessions,
      [],
      ledger("rf_AAAAAAAAAAAAAAAA", "rf_CCCCCCCCCCCCCCCC", "rf_DDDDDDDDDDDDDDDD"),
    );
    expect(audit).toMatchObject({ duplicate: 2, lost: 0, unowned: 1 });
  });
});

describe("percentile", () => {
  it("is the nearest rank", () => {
    const values = Array.from({ length: 100 }, (_, i) => i + 1);
    expect([percentile(values, 50), percentile(values, 95), percentile(values, 99), percentile(values, 100)]).toEqual([
      50, 95, 99, 100,
    ]);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeUndefined();
  });
});

describe("computeReport", () => {
  const base: ReportInput = {
    options,
    outcomes: [],
    audit: auditSideEffects([], [], []),
    tools: {
      "kb-search": {
        offered: 40,
        attempts: 45,
        fallbacks: 12,
        failed: 1,
        failures: { "error DEADLINE_EXCEEDED": 1 },
        breakerTransitions: { open: 1, "half-open": 1, closed: 1 },
      },
      billing: {
        offered: 30,
        attempts: 30,
        fallbacks: 0,
        failed: 2,
        failures: { "breaker_rejected UNAVAILABLE": 2 },
        breakerTransitions: {},
      },
    },
    deadWindows: [
      { fromMs: 1000, toMs: 4000, offered: 10, attempts: 11 },
      { fromMs: 6000, toMs: 8000, offered: 10, attempts: 12 },
    ],
    faults: [],
    approvalsResolved: 1,
    parks: 7,
    boundMs: 90_000,
    runtimeMs: 1234.5,
    runnerCpuMs: 99.6,
    containers: { "kb-search": 2 },
    notes: [],
  };

  it("counts sessions ended, lost and hung; success is the sessions that succeeded ÷ started: a degraded answer or an undone task is no success", () => {
    const cached = (ageMs: number) => step(2, { kind: "tool_call", served_from: "cache" }, { ok: true, ageMs });
    const report = computeReport({
      ...base,
      outcomes: [
        outcome({ records: [step(2, { kind: "tool_call", served_from: "live" })], durationMs: 100 }),
        outcome({ records: [cached(60_000)], durationMs: 200 }),
        outcome({ records: [cached(1000), cached(3000)], durationMs: 200 }),
        outcome({
          records: [step(2, { kind: "tool_call", served_from: "degraded" })],
          outcome: "partial",
          outcomeReason: "degraded: kb_search_search",
          durationMs: 300,
        }),
        outcome({ outcome: "not_done", outcomeReason: "no_effect: billing_refund", durationMs: 300 }),
        outcome({
          state: "FAILED",
          stopReason: "tool_unavailable",
          outcome: "not_done",
          outcomeReason: "tool_unavailable",
          durationMs: 400,
        }),
        outcome({ state: "PARKED", stopReason: "", outcome: "", durationMs: 500 }),
        outcome({ sessionId: undefined, state: undefined, durationMs: undefined, trace: undefined }),
      ],
    });
    expect(report).toMatchObject({
      sessions_started: 8,
      sessions_ended: 6,
      sessions_lost: 1,
      sessions_hung: 1,
      success_rate: 0.375,
      outcomes: { succeeded: 3, partial: 1, not_done: 2 },
      done_live: 1,
      done_cached: 2,
      done_cached_age_ms: { p50: 3000, max: 60_000 },
      done_degraded: 1,
      not_done: { "no_effect: billing_refund": 1, tool_unavailable: 1, "hung in PARKED": 1, lost: 1 },
      done: { live: 2, cache: 2, degraded: 1 },
      stop_reasons: { done: 5, tool_unavailable: 1 },
      parks: 7,
      p50_ms: 200,
      p99_ms: 400,
    });
  });

  it("adds up the dead windows into the ratio of attempts that reached the dead tool to calls offered", () => {
    const report = computeReport(base);
    expect(report).toMatchObject({
      calls_offered: 40,
      calls_offered_while_down: 20,
      calls_reaching_dead_tool: 23,
      dead_tool_ratio: 1.15,
      calls_failed: 3,
      calls_failed_by_tool: { "kb-search": 1, billing: 2 },
      fallbacks_served: { "kb-search": 12, billing: 0 },
      breaker_transitions: { "kb-search": { open: 1, "half-open": 1, closed: 1 }, billing: {} },
      runtime_ms: 1235,
      runner_cpu_ms: 100,
    });
  });

  it("has no dead-tool figures when no window had the tool dead", () => {
    const report = computeReport({ ...base, deadWindows: [] });
    expect([report.calls_offered_while_down, report.calls_reaching_dead_tool, report.dead_tool_ratio]).toEqual([
      null,
      null,
      null,
    ]);
  });

  it("counts an ended session whose step records could not be read as unverified, not as done live, and says what that leaves unchecked", () => {
    const report = computeReport({ ...base, outcomes: [outcome({}), { ...outcome({}), trace: undefined }] });
    expect([report.sessions_unverified, report.done.live]).toEqual([1, 1]);
    expect(report.notes.at(-1)).toMatch(/^1 ended session\(s\) had step records that could not be read/);
    expect(computeReport({ ...base, outcomes: [outcome({})] }).sessions_unverified).toBe(0);
  });

  it("counts a session finished twice", () => {
    const report = computeReport({
      ...base,
      outcomes: [
        outcome({ records: [step(3, { kind: "final", accepted: true }), step(5, { kind: "final", accepted: true })] }),
      ],
    });
    expect(report.sessions_ended_twice).toBe(1);
  });
});
