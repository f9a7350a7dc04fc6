// toolClient's breakers against a real billing on loopback whose Refund is slow (an order's lock held
// by another refund) while GetOrder answers at once: one method's failures refuse that method only.
import { setTimeout as sleep } from "node:timers/promises";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { Registry } from "prom-client";
import { afterEach, expect, it } from "vitest";
import type { CallError } from "../src/client/call-error.js";
import { toolClient } from "../src/client/tool-client.js";
import { status } from "../src/errors.js";
import { boundToken, metricValue, startTestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ORDER = {
  orderId: "ord_AAAABBBBCCCC",
  customerId: "cus_1",
  status: 2,
  amountPaidCents: 1000n,
  amountRefundedCents: 0n,
  refundableCents: 1000n,
  currency: "EUR",
  createdAt: { seconds: 1n },
  version: 1n,
};

/** A billing whose refunds take 5 s and whose reads answer at once, and a client of it. */
async function billingWithSlowRefunds(registry: Registry) {
  const tool = await startTestTool({
    service: BillingService,
    handlers: {
      getOrder: async () => ({ order: ORDER }),
      listRefunds: async () => ({ refunds: [] }),
      refund: async (_req, ctx) => {
        await sleep(5_000, undefined, { signal: ctx.signal }).catch(() => undefined);
        throw new Error("not reached: the caller's deadline ends the call first");
      },
    },
  });
  cleanups.push(() => tool.close());
  const token = await testToken({ subject: "orchestrator", scopes: ["billing:refund", "billing:read"] });
  const client = toolClient(BillingService, {
    target: tool.address,
    token,
    registry,
    random: () => 1,
    hedge: { enabled: false },
    timeoutMs: { refund: 200 },
  });
  cleanups.push(() => client.close());
  return client;
}

const live = { fallback: false, degraded: false } as const;
const errorOf = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as CallError,
  );

it("opens the breaker of a slow method only: the tool's other methods still reach it", async () => {
  const registry = new Registry();
  const client = await billingWithSlowRefunds(registry);
  const refund = async (i: number) => {
    const request = {
      orderId: ORDER.orderId,
      amountCents: 100n,
      reason: 1,
      idempotencyKey: `breaker-method-key-${i}`,
      maxRefundedTotalCents: 100n,
    };
    return errorOf(client.call("refund", request, { token: await boundToken(BillingService, "Refund", request) }));
  };
  const timedOut = await Promise.all(Array.from({ length: 5 }, (_, i) => refund(i)));
  expect(timedOut.map((e) => e?.code)).toEqual(Array(5).fill(status.DEADLINE_EXCEEDED));
  const refused = await refund(5);
  expect([refused?.code, refused?.reason]).toEqual([status.UNAVAILABLE, "BREAKER_OPEN"]);

  const order = await client.call("getOrder", { orderId: ORDER.orderId }, live);
  expect([order.source, order.attempts, order.response.order?.orderId]).toEqual(["live", 1, ORDER.orderId]);
  expect(client.breakerStateOf("getOrder")).toBe("closed");
  expect(client.breakerStateOf("refund")).toBe("open");
  // The tool's gauge (what ToolBreakerOpen reads) still says some method of it is refused.
  expect(client.breakerState).toBe("open");
  expect(metricValue(await registry.metrics(), "loopguard_tool_breaker_state")).toBe(2);
});
