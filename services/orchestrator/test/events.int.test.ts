// Waiting on the store's change events instead of polling it: a watcher of a session that does
// not move reads nothing, and a cancel that waits for an irreversible call's outcome wakes when
// that outcome is recorded. Real tool processes, a real orchestrator API.
import { setTimeout as sleep } from "node:timers/promises";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient } from "@loopguard/tool-sdk";
import { testToken } from "@loopguard/tool-sdk/testing";
import { describe, expect, it, vi } from "vitest";
import { HIGH_RISK_CUSTOMER, LOW_RISK_CUSTOMER, startRefund, useSuite, waitForSession } from "./harness.js";

const suite = useSuite({ orchestrator: { APPROVAL_TTL_MS: "300000" } });

describe("waiting on store events", () => {
  it("a watcher of a waiting session reads nothing from the store until the session moves, then hears the move", async () => {
    const id = await startRefund(suite.orch.api, "ord_DEMO00000008", 1000, HIGH_RISK_CUSTOMER);
    await waitForSession(suite.orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
    const store = suite.orch.orchestrator.store;
    const reads = [vi.spyOn(store, "get"), vi.spyOn(store, "auditTrail"), vi.spyOn(store, "steps")];
    const count = () =>
      reads.reduce((n, spy) => n + spy.mock.calls.filter(([sessionId]) => sessionId === id).length, 0);
    try {
      const stream = suite.orch.api.watchSession({ sessionId: id })[Symbol.asyncIterator]();
      const seen: string[] = [];
      while (!seen.includes("AWAITING_APPROVAL")) {
        const { value } = await stream.next();
        if (value?.event.case === "transition") seen.push(SessionState[value.event.value.to] ?? "");
      }
      const afterCatchUp = count();
      await sleep(1500);
      // Polling read the session every 150 ms; waiting on events reads nothing while nothing moves.
      expect(count()).toBe(afterCatchUp);
      await suite.orch.api.cancelSession({ sessionId: id, reason: "watched enough" });
      const next: string[] = [];
      for (let r = await stream.next(); !r.done; r = await stream.next()) {
        if (r.value.event.case === "transition") next.push(SessionState[r.value.event.value.to]);
      }
      expect(next).toEqual(["CANCELLED"]);
    } finally {
      for (const spy of reads) spy.mockRestore();
    }
  });

  it("a cancel during an irreversible call waits for its outcome, woken by the transition that records it, and names what was done", async () => {
    const admin = createRawClient(ToolAdminService, suite.tools.billing.address, {
      token: await testToken({ subject: "drill", scopes: ["tool:admin"], audience: "billing" }),
    });
    await admin.setFaults({ profile: { addedLatencyMs: 1200, methods: ["Refund"] } });
    try {
      const id = await startRefund(suite.orch.api, "ord_DEMO00000001", 200, LOW_RISK_CUSTOMER);
      for (let i = 0; i < 200; i += 1) {
        const s = await suite.orch.orchestrator.store.get(id);
        if (
          s?.state === "TOOL_EXECUTING" &&
          (s.pending as { call?: { tool?: string } } | null)?.call?.tool === "billing_refund"
        )
          break;
        await sleep(25);
      }
      const cancelled = (await suite.orch.api.cancelSession({ sessionId: id, reason: "customer called back" }))
        .session!;
      expect(SessionState[cancelled.state]).toBe("CANCELLED");
      const refundId = /refund:(rf_[A-Za-z0-9]{16})/.exec(cancelled.answer)?.[1];
      expect(cancelled.answer).toMatch(
        /^cancelled by test: customer called back; already done before the cancel: billing_refund refund:rf_/,
      );
      const billing = createRawClient(BillingService, suite.tools.billing.address, {
        token: await testToken({ subject: "test", scopes: ["billing:read"] }),
      });
      expect((await billing.listRefunds({ orderId: "ord_DEMO00000001" })).refunds.map((r) => r.refundId)).toContain(
        refundId,
      );
      billing.close();
    } finally {
      await admin.setFaults({ profile: {} });
      admin.close();
    }
  });
});
