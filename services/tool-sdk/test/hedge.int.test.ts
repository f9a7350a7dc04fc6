// Hedged reads against real kb-search replicas on loopback: one replica slowed by the tool's own
// fault switch (as SetFaults does), a real toolClient balancing over the three.
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import type { ToolClientOptions } from "../src/client/plan.js";
import { toolClient } from "../src/client/tool-client.js";
import { status, ToolError } from "../src/errors.js";
import { boundToken, metricValue, startTestTool, type TestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const SLOW_MS = 2000;
/**
 * Fixed hedge delay for these tests (the observed p95 needs more answers than a test makes), long
 * enough that a healthy replica on a busy test machine answers well before it.
 */
const HEDGE = { fallbackDelayMs: 250, minSamples: 10_000 };

interface Replica {
  readonly tool: TestTool<typeof KbSearchService>;
  /** Searches its handler answered. */
  answered: number;
}

async function kbReplicas(n: number, fail?: (index: number) => ToolError | undefined): Promise<Replica[]> {
  const replicas: Replica[] = [];
  for (let index = 0; index < n; index++) {
    const replica: { tool?: TestTool<typeof KbSearchService>; answered: number } = { answered: 0 };
    replica.tool = await startTestTool({
      service: KbSearchService,
      handlers: {
        search: async (req) => {
          const failure = fail?.(index);
          if (failure) throw failure;
          replica.answered += 1;
          return {
            hits: [{ docId: `doc-${index}`, version: 1, title: req.query, snippet: "…", score: 1, category: "policy" }],
          };
        },
      },
    });
    cleanups.push(() => replica.tool?.close());
    replicas.push(replica as Replica);
  }
  return replicas;
}

function slow(replica: Replica, ms = SLOW_MS): void {
  replica.tool.server.faults.set({
    $typeName: "loopguard.tool.v1.FaultProfile",
    addedLatencyMs: ms,
    responseDelayMs: 0,
    errorRate: 0,
    outage: false,
    retryAfterMs: 0,
    methods: [],
  });
}

async function kbClient(replicas: Replica[], overrides: Partial<ToolClientOptions> = {}) {
  const registry = new Registry();
  const token = await testToken({ subject: "orchestrator", scopes: ["kb:read"] });
  const client = toolClient(KbSearchService, {
    target: replicas.map((r) => r.tool.address),
    token,
    registry,
    random: () => 0,
    hedge: HEDGE,
    ...overrides,
  });
  cleanups.push(() => client.close());
  // Every replica answers once, so the client knows there is another replica to hedge to.
  for (let i = 0; i < replicas.length; i++) await client.call("search", { query: "warm up", limit: 1 });
  return { client, registry };
}

const clientMetric = async (registry: Registry, name: string) =>
  metricValue(await registry.metrics(), name, { tool: "kb-search", method: "Search" });
const cancelledOn = async (replica: Replica) =>
  metricValue(await replica.tool.server.metrics.registry.metrics(), "grpc_server_handled_total", {
    grpc_method: "Search",
    grpc_code: "CANCELLED",
  });

describe("hedged reads", () => {
  it("sends a hedge to another replica when one is slow, answers from it and cancels the slow attempt", async () => {
    const replicas = await kbReplicas(3);
    const { client, registry } = await kbClient(replicas);
    slow(replicas[0]!);
    const answeredBefore = replicas[0]!.answered;
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await client.call("search", { query: `q${i}`, limit: 1 }));
    // Round robin sends at least one of three calls to the slow replica first (a hedge takes a pick too).
    const hedged = results.filter((r) => r.hedged);
    expect(hedged.length).toBeGreaterThanOrEqual(1);
    for (const r of hedged) {
      expect(r).toMatchObject({ source: "live", attempts: 2, winningAttempt: 2 });
      expect(r.response.hits[0]?.docId).not.toBe("doc-0");
    }
    for (const r of results) expect(r.latencyMs).toBeLessThan(SLOW_MS / 2);
    expect(replicas[0]!.answered).toBe(answeredBefore);
    await expect.poll(() => cancelledOn(replicas[0]!)).toBe(hedged.length);
    expect(await clientMetric(registry, "loopguard_tool_client_hedges_total")).toBe(hedged.length);
    expect(await clientMetric(registry, "loopguard_tool_client_hedges_won_total")).toBe(hedged.length);
    expect(await clientMetric(registry, "loopguard_tool_client_hedge_losers_cancelled_total")).toBe(hedged.length);
    expect(await clientMetric(registry, "loopguard_tool_client_retries_total")).toBe(0);
  });

  it("stops sending first attempts to a replica that keeps losing to hedges", async () => {
    const replicas = await kbReplicas(3);
    const { client, registry } = await kbClient(replicas, { hedge: { ...HEDGE, lossesToAvoid: 2 } });
    slow(replicas[0]!);
    for (let i = 0; i < 12; i++) await client.call("search", { query: `q${i}`, limit: 1 });
    // Two losses (calls 1 and 4 of 12), then every first attempt goes to the healthy two.
    expect(await clientMetric(registry, "loopguard_tool_client_hedges_won_total")).toBe(2);
  });

  it("stops sending first attempts to a replica whose answers keep coming late, even with no budget for hedges", async () => {
    const replicas = await kbReplicas(3);
    const { client, registry } = await kbClient(replicas, {
      retry: { budgetRatio: 0, budgetMaxTokens: 0 },
      hedge: { ...HEDGE, lossesToAvoid: 2 },
    });
    slow(replicas[0]!, 500);
    const results = [];
    for (let i = 0; i < 12; i++) results.push(await client.call("search", { query: `q${i}`, limit: 1 }));
    expect(results.filter((r) => r.latencyMs >= 500)).toHaveLength(2);
    expect(await clientMetric(registry, "loopguard_tool_client_hedges_total")).toBe(0);
  });

  it("sends no hedge when the first answer comes before the delay", async () => {
    const replicas = await kbReplicas(3);
    const { client, registry } = await kbClient(replicas);
    slow(replicas[0]!, 50);
    for (let i = 0; i < 6; i++)
      expect(await client.call("search", { query: `q${i}`, limit: 1 })).toMatchObject({ attempts: 1, hedged: false });
    expect(await clientMetric(registry, "loopguard_tool_client_hedges_total")).toBe(0);
  });

  it("sends no hedge once the retry budget is spent, nor beyond the call's extra attempts", async () => {
    const replicas = await kbReplicas(3);
    const spent = await kbClient(replicas, { retry: { budgetRatio: 0, budgetMaxTokens: 0 } });
    const limited = await kbClient(replicas);
    slow(replicas[0]!, 600);
    const waited = [];
    for (let i = 0; i < 3; i++) waited.push(await spent.client.call("search", { query: `q${i}`, limit: 1 }));
    for (let i = 0; i < 3; i++)
      waited.push(await limited.client.call("search", { query: `q${i}`, limit: 1 }, { maxExtraAttempts: 0 }));
    expect(waited.map((r) => r.hedged)).toEqual([false, false, false, false, false, false]);
    expect(waited.filter((r) => r.latencyMs >= 600)).toHaveLength(2);
    expect(await clientMetric(spent.registry, "loopguard_tool_client_hedges_total")).toBe(0);
    expect(await clientMetric(limited.registry, "loopguard_tool_client_hedges_total")).toBe(0);
  });

  it("retries a failed first attempt once, without a hedge on top", async () => {
    const fault = { armed: false, failures: 0 };
    const replicas = await kbReplicas(3, (index) =>
      index === 0 && fault.armed && fault.failures++ < 1
        ? new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "index reloading")
        : undefined,
    );
    const { client, registry } = await kbClient(replicas);
    fault.armed = true;
    const results = [];
    for (let i = 0; i < 3; i++) results.push(await client.call("search", { query: `q${i}`, limit: 1 }));
    expect(fault.failures).toBeGreaterThanOrEqual(1);
    expect(results.map((r) => r.attempts).sort()).toEqual([1, 1, 2]);
    expect(results.every((r) => !r.hedged)).toBe(true);
    expect(await clientMetric(registry, "loopguard_tool_client_retries_total")).toBe(1);
    expect(await clientMetric(registry, "loopguard_tool_client_hedges_total")).toBe(0);
  });

  it("never hedges a method its contract does not mark hedgeable", async () => {
    const replicas = [];
    for (let index = 0; index < 2; index++) {
      const tool = await startTestTool({
        service: BillingService,
        handlers: {
          getOrder: async () => {
            throw new ToolError(status.NOT_FOUND, "ORDER_NOT_FOUND", "no such order");
          },
          listRefunds: async () => ({ refunds: [] }),
          refund: async (req) => ({
            refund: {
              refundId: "rf_AAAABBBBCCCCDDDD",
              orderId: req.orderId,
              amountCents: req.amountCents,
              reason: req.reason,
              createdAt: { seconds: 1n },
            },
            orderRefundableCents: 0n,
          }),
        },
      });
      cleanups.push(() => tool.close());
      replicas.push(tool);
    }
    const registry = new Registry();
    const token = await testToken({ subject: "orchestrator", scopes: ["billing:refund", "billing:read"] });
    const client = toolClient(BillingService, {
      target: replicas.map((r) => r.address),
      token,
      registry,
      hedge: HEDGE,
    });
    cleanups.push(() => client.close());
    const refund = async (i: number) => {
      const request = {
        orderId: "ord_AAAABBBBCCCC",
        amountCents: 100n,
        reason: 1,
        idempotencyKey: `hedge-test-key-000${i}`,
        maxRefundedTotalCents: 100n,
      };
      return client.call("refund", request, { token: await boundToken(BillingService, "Refund", request) });
    };
    for (let i = 0; i < 2; i++) await refund(i);
    replicas[0]!.server.faults.set({
      $typeName: "loopguard.tool.v1.FaultProfile",
      addedLatencyMs: 600,
      responseDelayMs: 0,
      errorRate: 0,
      outage: false,
      retryAfterMs: 0,
      methods: [],
    });
    const results = [await refund(2), await refund(3)];
    expect(results.map((r) => r.attempts)).toEqual([1, 1]);
    expect(results.filter((r) => r.latencyMs >= 600)).toHaveLength(1);
    expect(metricValue(await registry.metrics(), "loopguard_tool_client_hedges_total")).toBe(0);
  });
});
