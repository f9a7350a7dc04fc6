// The series a client exports before its first call: what the alerts' increase() needs to count it.
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { parseMetrics, samplesOf } from "../prometheus-text.js";
import { ClientMetrics } from "./client-metrics.js";
import { toolClient } from "./tool-client.js";

describe("ClientMetrics", () => {
  it("exports each method's live calls, and the fallbacks its contract serves in an outage, at 0 from the client's start", async () => {
    const registry = new Registry();
    const metrics = new ClientMetrics(registry);
    const clients = [KbSearchService, BillingService].map((service) =>
      toolClient(service, { target: "127.0.0.1:1", metrics }),
    );
    try {
      const calls = samplesOf(parseMetrics(await registry.metrics()), "loopguard_tool_client_calls_total");
      const outage = ["DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE"];
      // Search is CACHE_THEN_EMPTY; billing's methods are freshness-critical, with no fallback. No error series:
      // they are made by the code the failure carries.
      expect(
        calls
          .map((s) => `${s.labels.tool} ${s.labels.method} ${s.labels.outcome} ${s.labels.grpc_code} ${s.value}`)
          .sort(),
      ).toEqual(
        [
          "billing GetOrder ok OK 0",
          "billing ListRefunds ok OK 0",
          "billing Refund ok OK 0",
          "kb-search Search ok OK 0",
          ...outage.map((code) => `kb-search Search fallback_cache ${code} 0`),
          ...outage.map((code) => `kb-search Search fallback_degraded ${code} 0`),
        ].sort(),
      );
    } finally {
      for (const client of clients) client.close();
    }
  });
});
