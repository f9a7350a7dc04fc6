// toolClient against real tool processes, with faults made by real SIGKILL.
import { setTimeout as sleep } from "node:timers/promises";
import { freePort, kill, type ServiceProcess, tempDir } from "@loopguard/test-kit";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { createRawClient, toolClient, type ToolResult } from "@loopguard/tool-sdk";
import { boundToken, metricValue, startTool, testToken } from "@loopguard/tool-sdk/testing";
import { Registry } from "prom-client";
import { afterAll, afterEach, describe, expect, it } from "vitest";

const data = tempDir("e2e");
const running: ServiceProcess[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((p) => kill(p)));
});
afterAll(() => data.remove());

async function token(): Promise<string> {
  return testToken({ subject: "orchestrator", scopes: ["kb:read"], ttlSeconds: 600 });
}

describe("toolClient against real kb-search processes", () => {
  it("answers from cache while kb-search is killed, degrades new queries, and goes live again after restart", async () => {
    const port = await freePort();
    const first = await startTool("kb-search", data.dir, port);
    running.push(first);
    const kb = toolClient(KbSearchService, {
      target: `127.0.0.1:${port}`,
      token: await token(),
      registry: new Registry(),
      breaker: { resetTimeoutMs: 300 },
      timeoutMs: { "*": 500 },
    });
    try {
      const live = await kb.call("search", { query: "refund", limit: 3 });
      expect(live.source).toBe("live");

      await kill(first);
      await sleep(50);
      for (let i = 0; i < 5; i += 1) {
        const cached = await kb.call("search", { query: "refund", limit: 3 });
        expect(cached.source).toBe("cache");
        expect(cached.cacheAgeMs).toBeGreaterThan(0);
        expect(cached.response).toEqual(live.response);
      }
      const unseen = await kb.call("search", { query: "chargeback dispute", limit: 3 });
      expect(unseen.source).toBe("degraded");
      expect(unseen.response.hits).toEqual([]);

      const second = await startTool("kb-search", data.dir, port);
      running.push(second);
      let source = "";
      const until = Date.now() + 10_000;
      while (source !== "live" && Date.now() < until) {
        source = (await kb.call("search", { query: "chargeback dispute", limit: 3 })).source;
        if (source !== "live") await sleep(100);
      }
      expect(source).toBe("live");
    } finally {
      kb.close();
    }
  });

  it("keeps succeeding on the other replica when one of two is SIGKILLed under load", async () => {
    const a = await startTool("kb-search", data.dir);
    const b = await startTool("kb-search", data.dir);
    running.push(a, b);
    // The retry budget holds a retry for each of the 8 calls that may be in flight on the killed
    // replica, beside the half of it that hedges may spend (docs/tool-sdk.md, sizing the budget).
    const kb = toolClient(KbSearchService, {
      target: [a.address, b.address],
      token: await token(),
      registry: new Registry(),
      retry: { budgetMaxTokens: 20 },
    });
    try {
      const results: ToolResult<unknown>[] = [];
      const stopAt = Date.now() + 2000;
      const worker = async () => {
        while (Date.now() < stopAt)
          results.push(await kb.call("search", { query: `refund ${results.length % 7}`, limit: 2 }));
      };
      const load = Promise.all(Array.from({ length: 8 }, worker));
      await sleep(500);
      await kill(a);
      await load;
      expect(results.length).toBeGreaterThan(50);
      const notLive = results.filter((r) => r.source !== "live");
      expect(
        notLive.map((r) => [r.source, r.attempts, r.liveError?.code, r.liveError?.reason, r.liveError?.message]),
      ).toEqual([]);
    } finally {
      kb.close();
    }
  });
});

describe("toolClient against a real billing process", () => {
  it("retries a refund that carries its idempotency key through an outage and refunds exactly once", async () => {
    const billingData = tempDir("e2e");
    const proc = await startTool("billing", billingData.dir);
    running.push(proc);
    const token = await testToken({
      subject: "orchestrator",
      scopes: ["billing:read", "billing:refund", "tool:admin"],
    });
    const admin = createRawClient(ToolAdminService, proc.address, { token });
    const billing = toolClient(BillingService, {
      target: proc.address,
      token,
      registry: new Registry(),
      retry: { maxAttempts: 8 },
      breaker: { volumeThreshold: 1000 },
    });
    try {
      // Billing is down (RetryInfo 100 ms) when the refund is sent, and back 350 ms later.
      await admin.setFaults({ profile: { outage: true, retryAfterMs: 100, methods: ["Refund"] } });
      const key = "e2e-retry-key-0000000001";
      const request = {
        orderId: "ord_DEMO00000001",
        amountCents: 100n,
        reason: RefundReason.DAMAGED,
        idempotencyKey: key,
        // The bound the orchestrator always sends (here one the order never reaches).
        maxRefundedTotalCents: 1_000_000_000n,
      };
      // Billing takes a refund only under a token bound to it, as the orchestrator sends one.
      const bound = { token: await boundToken(BillingService, "Refund", request) };
      const pending = billing.call("refund", request, bound);
      await sleep(350);
      await admin.setFaults({ profile: {} });
      const result = await pending;
      expect(result.source).toBe("live");
      expect(result.attempts).toBeGreaterThan(1);
      const again = await billing.call("refund", request, bound);
      expect(again.response.replayed).toBe(true);
      expect(again.response.refund?.refundId).toBe(result.response.refund?.refundId);
      const refunds = await billing.call("listRefunds", { orderId: "ord_DEMO00000001" });
      expect(refunds.response.refunds.filter((r) => r.refundId === result.response.refund?.refundId)).toHaveLength(1);
      const page = await fetch(`http://127.0.0.1:${proc.metricsPort}/metrics`).then((r) => r.text());
      expect(metricValue(page, "grpc_server_started_total", { grpc_method: "Refund" })).toBe(
        result.attempts + again.attempts,
      );
    } finally {
      billing.close();
      admin.close();
      billingData.remove();
    }
  });
});
