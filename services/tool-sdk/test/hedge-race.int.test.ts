// How a hedge race ends, against real risk and kb-search replicas on loopback: on the first answer the
// tool gives (a success, or a refusal of the request such as NOT_FOUND), the other attempts cancelled;
// only when every attempt failed for a reason that passes does the call fail, with the most telling one.
import { setTimeout as sleep } from "node:timers/promises";
import type { DescService } from "@bufbuild/protobuf";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { Registry } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { toolClient } from "../src/client/tool-client.js";
import type { CallContext } from "../src/server/handler.js";
import { status, ToolError } from "../src/errors.js";
import { metricValue, startTestTool, type TestTool, testToken } from "../testing/index.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A fixed hedge delay: the observed p95 needs more answers than a test makes. */
const HEDGE = { fallbackDelayMs: 250, minSamples: 10_000 };
const REQ = { idCard: "110101198003121232", phone: "13800138000" };

/**
 * What the replicas answer: "ok", or from `failing` on, the first arrival held past the call's
 * SLA timeout (1.5 s for risk, 1 s for kb-search; a cancel cuts it short), then `failure` everywhere.
 */
const world = { failing: false, arrivals: 0, failure: undefined as ToolError | undefined };

async function answer<T>(ctx: CallContext, ok: T): Promise<T> {
  if (!world.failing) return ok;
  world.arrivals += 1;
  if (world.arrivals === 1) await sleep(3000, undefined, { signal: ctx.signal }).catch(() => undefined);
  throw world.failure;
}

const RISK = { riskScore: 5, reason: "clean history", factors: [] };
const HIT = { docId: "doc-0", version: 1, title: "t", snippet: "…", score: 1, category: "policy" };

async function twoReplicas<S extends DescService>(service: S, scope: string, failure: ToolError) {
  world.failing = false;
  world.arrivals = 0;
  world.failure = failure;
  const tools: TestTool<DescService>[] = [];
  for (let i = 0; i < 2; i++) {
    const tool = await startTestTool({
      service: service === (RiskService as DescService) ? RiskService : KbSearchService,
      handlers: {
        queryRisk: (_req: unknown, ctx: CallContext) => answer(ctx, RISK),
        getCustomerRisk: (_req: unknown, ctx: CallContext) => answer(ctx, RISK),
        search: (_req: unknown, ctx: CallContext) => answer(ctx, { hits: [HIT] }),
      },
    } as never);
    cleanups.push(() => tool.close());
    tools.push(tool as TestTool<DescService>);
  }
  const registry = new Registry();
  const client = toolClient(service, {
    target: tools.map((t) => t.address),
    token: await testToken({ subject: "orchestrator", scopes: [scope] }),
    registry,
    random: () => 0,
    hedge: HEDGE,
  });
  cleanups.push(() => client.close());
  return { client, registry, tools };
}

const cancelledOn = async (tools: TestTool<DescService>[], method: string) => {
  let cancelled = 0;
  for (const tool of tools)
    cancelled += metricValue(await tool.server.metrics.registry.metrics(), "grpc_server_handled_total", {
      grpc_method: method,
      grpc_code: "CANCELLED",
    });
  return cancelled;
};

describe("how a hedge race ends", () => {
  it("a live read fails with the hedge's NOT_FOUND at once, not the slow attempt's deadline", async () => {
    const notFound = new ToolError(status.NOT_FOUND, "USER_NOT_FOUND", "no customer has this customer id");
    const { client, tools } = await twoReplicas(RiskService, "risk:read", notFound);
    for (let i = 0; i < 2; i++) await client.call("getCustomerRisk", { customerId: "cust_x" });
    world.failing = true;
    const started = performance.now();
    const failure = await client.call("getCustomerRisk", { customerId: "cust_x" }, { fallback: false }).catch((e) => e);
    expect(failure).toMatchObject({ code: status.NOT_FOUND, reason: "USER_NOT_FOUND", attempts: 2 });
    expect(performance.now() - started).toBeLessThan(1000);
    await expect.poll(() => cancelledOn(tools, "GetCustomerRisk")).toBe(1);
  });

  it("a cached read is not answered from the cache when the hedge says INVALID_ARGUMENT or NOT_FOUND", async () => {
    const refusals = [
      new ToolError(status.INVALID_ARGUMENT, "INVALID_PHONE_FORMAT", "phone is not a CN mobile number"),
      new ToolError(status.NOT_FOUND, "USER_NOT_FOUND", "no customer has this id card and phone"),
    ];
    for (const refusal of refusals) {
      const { client } = await twoReplicas(RiskService, "risk:read", refusal);
      for (let i = 0; i < 2; i++) expect(await client.call("queryRisk", REQ)).toMatchObject({ source: "live" });
      world.failing = true;
      const outcome = await client.call("queryRisk", REQ).then(
        (r) => ({ source: r.source, riskScore: r.response.riskScore }),
        (e) => ({ code: e.code, reason: e.reason }),
      );
      expect(outcome).toEqual({ code: refusal.code, reason: refusal.reason });
    }
  });

  it("when every attempt fails for a reason that passes, fails with the replica's own word, not the deadline", async () => {
    const down = new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "index reloading", { retryAfterMs: 2000 });
    const { client } = await twoReplicas(KbSearchService, "kb:read", down);
    for (let i = 0; i < 2; i++) await client.call("search", { query: "warm up", limit: 1 });
    world.failing = true;
    // No retry after the race (one extra attempt: the hedge), so the race's own failure is what the caller gets.
    const failure = await client
      .call("search", { query: "q", limit: 1 }, { fallback: false, maxExtraAttempts: 1 })
      .catch((e) => e);
    expect(failure).toMatchObject({
      code: status.UNAVAILABLE,
      reason: "INDEX_UNAVAILABLE",
      retryAfterMs: 2000,
      attempts: 2,
    });
  });
});
