// A tool's bad minute, waited out: real tool processes put into an outage with their own admin
// RPC, a real orchestrator. A session that needs the tool parks (PARKED, shown with why and until
// when), wakes when the tool is back and does its task once; one whose wall clock runs out first
// ends saying which tool was down and that nothing was done; a parked session outlives its
// orchestrator, and so does one whose orchestrator stops in the middle of its call to the tool that
// is down; a recovered tool's backlog comes back at the configured rate.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { FaultProfileSchema } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { metricValue } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { pendingOf } from "../src/session/data.js";
import {
  ALL_SCOPES,
  LOW_RISK_CUSTOMER,
  refundsOf,
  setFaults,
  startOrchestrator,
  startRefund,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const suite = useSuite();

const faults = (tool: string, profile: MessageInitShape<typeof FaultProfileSchema>) =>
  setFaults(suite.tools, tool, profile);

/** This run's refunds: the demo data's own (rf_DEMO…) left out. */
const runRefundsOf = async (orderId: string) =>
  (await refundsOf(suite.tools, orderId)).filter((r) => !r.refundId.startsWith("rf_DEMO"));

const parked = (s: { state: SessionState }) => s.state === SessionState.PARKED;

// First in the file: billing's breaker is still closed, so the session parks at the refund itself, holding its amount.
describe("a parked session can be cancelled", () => {
  it("cancelling a refund parked on billing ends it CANCELLED and lets its hold go; nothing is refunded", async () => {
    await faults("billing", { outage: true, methods: ["Refund"] });
    try {
      const id = await startRefund(suite.orch.api, "ord_DEMO00000007", 150, LOW_RISK_CUSTOMER);
      await waitForSession(suite.orch.api, id, parked);
      const cancelled = (await suite.orch.api.cancelSession({ sessionId: id, reason: "customer withdrew" })).session!;
      expect([SessionState[cancelled.state], cancelled.stopReason, cancelled.outcome?.kind]).toEqual([
        "CANCELLED",
        "cancelled",
        "not_done",
      ]);
      expect((await suite.orch.orchestrator.store.reservations(id)).map((r) => r.status)).toEqual(["released"]);
    } finally {
      await faults("billing", {});
    }
    expect(await runRefundsOf("ord_DEMO00000007")).toEqual([]);
  });
});

describe("a session that needs a tool which is down parks, and goes on when it is back", () => {
  it("a refund asked for during a billing outage waits PARKED (tool, reason, wake time), then is made once", async () => {
    await faults("billing", { outage: true, methods: ["Refund"] });
    let id: string;
    try {
      id = await startRefund(suite.orch.api, "ord_DEMO00000001", 700, LOW_RISK_CUSTOMER);
      const waiting = await waitForSession(suite.orch.api, id, parked);
      expect(waiting.parked).toMatchObject({ tool: "billing", reason: expect.stringMatching(/^UNAVAILABLE/) });
      expect(timestampMs(waiting.parked!.wakeAt!)).toBeGreaterThan(timestampMs(waiting.parked!.since!));
      expect(waiting.stopReason).toBe("");
      expect(await runRefundsOf("ord_DEMO00000001")).toEqual([]);
    } finally {
      await faults("billing", {});
    }
    const done = await waitForSession(suite.orch.api, id, undefined, 30_000);
    expect([SessionState[done.state], done.stopReason]).toEqual(["DONE", "done"]);
    expect(done.outcome).toMatchObject({ kind: "succeeded", reason: "" });
    expect(done.answer).toMatch(/Refunded 700 cents of order ord_DEMO00000001/);
    const refunds = await runRefundsOf("ord_DEMO00000001");
    expect(refunds.map((r) => r.amountCents)).toEqual([700n]);
  });

  it("billing down for longer than the wall clock: FAILED tool_unavailable, the answer names billing and says nothing was done, the hold is let go", async () => {
    await faults("billing", { outage: true, methods: ["Refund"] });
    try {
      const { session } = await suite.orch.api.startSession({
        goal: "Refund 4.00 of ord_DEMO00000002",
        task: {
          kind: "refund",
          order_id: "ord_DEMO00000002",
          amount_cents: 400,
          reason: "DAMAGED",
          ...LOW_RISK_CUSTOMER,
        } as never,
        scopes: ALL_SCOPES,
        policy: "scripted",
        budget: { maxWallClockMs: 5000 },
      });
      const id = session!.sessionId;
      const ended = await waitForSession(suite.orch.api, id, undefined, 15_000);
      expect([SessionState[ended.state], ended.stopReason]).toEqual(["FAILED", "tool_unavailable"]);
      // Whether it parked first depends on Refund's own breaker: open from an earlier case, with no probe due
      // before the wall clock ends, the session gives up at once.
      expect(ended.answer).toMatch(
        /^billing was unavailable \(UNAVAILABLE[^)]*\) (since .*|for as long as the session's wall clock allowed;) nothing was done: billing_refund was not made\.$/,
      );
      expect(ended.outcome).toMatchObject({ kind: "not_done", reason: "tool_unavailable" });
      expect(await runRefundsOf("ord_DEMO00000002")).toEqual([]);
      expect((await suite.orch.orchestrator.store.reservations(id)).map((r) => r.status)).toEqual(["released"]);
    } finally {
      await faults("billing", {});
    }
  });
});

describe("answers that say what happened", () => {
  it("kb-search down with no cached answer: the answer says the knowledge base could not be searched, outcome partial", async () => {
    await faults("kb-search", { outage: true });
    try {
      const { session } = await suite.orch.api.startSession({
        goal: "What is the warranty on cables?",
        task: {},
        scopes: ALL_SCOPES,
        policy: "scripted",
        budget: { maxWallClockMs: 2500 },
      });
      const done = await waitForSession(suite.orch.api, session!.sessionId, undefined, 15_000);
      expect(done.answer).toBe(
        "The knowledge base was unavailable, so it could not be searched; this says nothing about whether it holds an answer. Please ask again later.",
      );
      expect(done.outcome).toMatchObject({ kind: "partial", reason: "degraded: kb_search_search" });
    } finally {
      await faults("kb-search", {});
    }
  });

  it("kb-search down, one retry in the budget: no more than one attempt and one retry, no parking past the budget, then the degraded answer, scored unhealthy", async () => {
    const searches = async () =>
      metricValue(await (await fetch(`${suite.orch.httpUrl}/metrics`)).text(), "grpc_client_handled_total", {
        grpc_method: "Search",
      });
    await faults("kb-search", { outage: true });
    try {
      const before = await searches();
      const { session } = await suite.orch.api.startSession({
        goal: "What is the warranty on fridge magnets?",
        task: {},
        scopes: ALL_SCOPES,
        policy: "scripted",
        budget: { maxWallClockMs: 15_000, maxRetries: 1 },
      });
      const done = await waitForSession(suite.orch.api, session!.sessionId, undefined, 30_000);
      // At most the first attempt and the one retry (fewer when the breaker is already open).
      expect(await searches()).toBeLessThanOrEqual(before + 2);
      expect(done.usage?.retries).toBeLessThanOrEqual(1);
      // Parked at most once: for the one re-send the budget has room for.
      const { transitions } = await suite.orch.api.getSessionDetail({ sessionId: done.sessionId });
      expect(transitions.filter((t) => t.to === "PARKED").length).toBeLessThanOrEqual(1);
      expect(done.outcome).toMatchObject({ kind: "partial", reason: "degraded: kb_search_search" });
      expect(done.healthScore).toBeLessThan(80);
    } finally {
      await faults("kb-search", {});
    }
  });

  it("kb-search down with a cached answer: answered at once from the cache, with its age, outcome succeeded", async () => {
    const ask = async () => {
      const { session } = await suite.orch.api.startSession({
        goal: "How do refunds work?",
        task: {},
        scopes: ALL_SCOPES,
        policy: "scripted",
      });
      return waitForSession(suite.orch.api, session!.sessionId, undefined, 15_000);
    };
    const live = await ask();
    expect(live.answer).toMatch(/^From the knowledge base: /);
    await faults("kb-search", { outage: true });
    try {
      const cached = await ask();
      expect(cached.answer).toMatch(
        /^From the knowledge base \(as of \d+ seconds? ago: the knowledge base is unavailable now and this is its last answer\): .*\[[a-z0-9-]+@\d+\]/,
      );
      expect(cached.outcome).toMatchObject({ kind: "succeeded" });
      const trace = (await suite.orch.api.getTrace({ sessionId: cached.sessionId })).records.map(
        (r) => JSON.parse(r) as { result?: { servedFrom?: string; ageMs?: number; note?: string } },
      );
      const fromCache = trace.find((r) => r.result?.servedFrom === "cache");
      expect(fromCache?.result?.ageMs).toBeGreaterThan(0);
      expect(fromCache?.result?.note).toMatch(
        /^kb-search is unavailable now \(UNAVAILABLE[^)]*\); this is its answer from \d+ seconds? ago/,
      );
    } finally {
      await faults("kb-search", {});
    }
  });
});

describe("parked sessions are durable and come back at a bounded rate", () => {
  it("a session parked under one orchestrator is woken and finished by the next one on the same store", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "loopguard-parked-"));
    await faults("billing", { outage: true, methods: ["Refund"] });
    let second: TestOrchestrator | undefined;
    try {
      const first = await startOrchestrator(suite.tools, { LOOPGUARD_DATA_DIR: dataDir });
      const id = await startRefund(first.api, "ord_DEMO00000005", 300, LOW_RISK_CUSTOMER);
      await waitForSession(first.api, id, parked);
      await first.close();
      await faults("billing", {});
      second = await startOrchestrator(suite.tools, { LOOPGUARD_DATA_DIR: dataDir });
      const done = await waitForSession(second.api, id, undefined, 30_000);
      expect([SessionState[done.state], done.outcome?.kind]).toEqual(["DONE", "succeeded"]);
      expect((await runRefundsOf("ord_DEMO00000005")).map((r) => r.amountCents)).toEqual([300n]);
    } finally {
      await faults("billing", {});
      await second?.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("an orchestrator stopped while a refund's call waits on billing in an outage: the stop waits for the call, the next orchestrator re-sends it with its key and parks it while billing is down, and the refund is made once", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "loopguard-parked-"));
    // Each Refund attempt takes 1.5 s to fail: long enough to stop the orchestrator in the middle of one.
    await faults("billing", { outage: true, addedLatencyMs: 1500, methods: ["Refund"] });
    let second: TestOrchestrator | undefined;
    try {
      const first = await startOrchestrator(suite.tools, { LOOPGUARD_DATA_DIR: dataDir });
      const id = await startRefund(first.api, "ord_DEMO00000009", 250, LOW_RISK_CUSTOMER);
      // The store names the call in flight: stop once it is the Refund.
      const refunding = async () => {
        const s = await first.orchestrator.store.get(id);
        return s?.state === "TOOL_EXECUTING" && pendingOf(s).call?.tool === "billing_refund";
      };
      const until = Date.now() + 20_000;
      while (!(await refunding())) {
        if (Date.now() > until) throw new Error(`session ${id} never called billing_refund`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const stopping = Date.now();
      await first.close();
      const stopMs = Date.now() - stopping;
      await faults("billing", { outage: true, methods: ["Refund"] });
      second = await startOrchestrator(suite.tools, { LOOPGUARD_DATA_DIR: dataDir });
      const waiting = await waitForSession(second.api, id, parked);
      expect(waiting.parked).toMatchObject({ tool: "billing", reason: expect.stringMatching(/^UNAVAILABLE/) });
      expect(await runRefundsOf("ord_DEMO00000009")).toEqual([]);
      await faults("billing", {});
      const done = await waitForSession(second.api, id, undefined, 30_000);
      expect([SessionState[done.state], done.outcome?.kind]).toEqual(["DONE", "succeeded"]);
      expect((await runRefundsOf("ord_DEMO00000009")).map((r) => r.amountCents)).toEqual([250n]);
      // The stop waited for the call in flight, within billing's SLA timeout, and no longer.
      expect(stopMs).toBeLessThan(7000);
    } finally {
      await faults("billing", {});
      await second?.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("when kb-search recovers, 30 parked questions wake at no more than ORCHESTRATOR_WAKE_PER_SECOND (10) and all answer live", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "loopguard-wake-"));
    const limited = await startOrchestrator(suite.tools, {
      LOOPGUARD_DATA_DIR: dataDir,
      ORCHESTRATOR_WAKE_PER_SECOND: "10",
    });
    try {
      await faults("kb-search", { outage: true });
      const ids: string[] = [];
      for (let i = 0; i < 30; i += 1) {
        const { session } = await limited.api.startSession({
          goal: `Which cables are covered? (${i})`,
          task: {},
          scopes: ALL_SCOPES,
          policy: "scripted",
        });
        ids.push(session!.sessionId);
      }
      for (const id of ids) await waitForSession(limited.api, id, parked);
      await faults("kb-search", {});
      const ended = await Promise.all(ids.map((id) => waitForSession(limited.api, id, undefined, 60_000)));
      expect(ended.map((s) => s.outcome?.kind)).toEqual(ids.map(() => "succeeded"));
      // Every wake is an audit row out of PARKED; in any one second there are at most 10 (+1 for a tick on the edge).
      const wakes = (await Promise.all(ids.map((id) => limited.orchestrator.store.auditTrail(id))))
        .flat()
        .filter((a) => a.from === "PARKED")
        .map((a) => a.at)
        .sort((a, b) => a - b);
      expect(wakes.length).toBeGreaterThanOrEqual(30);
      const busiest = Math.max(...wakes.map((at) => wakes.filter((other) => other >= at && other < at + 1000).length));
      expect(busiest).toBeLessThanOrEqual(11);
    } finally {
      await faults("kb-search", {});
      await limited.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
