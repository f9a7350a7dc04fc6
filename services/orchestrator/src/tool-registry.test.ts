import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { Degradation, Effect, RoutingTag } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { DEFAULT_TOOL_SERVICES, ToolRegistry } from "./tool-registry.js";

const registry = new ToolRegistry();

describe("ToolRegistry over the default contracts", () => {
  it("registers every method of kb-search, billing and risk under its model-visible name", () => {
    expect(registry.list().map((t) => t.name)).toEqual([
      "kb_search_search",
      "billing_get_order",
      "billing_refund",
      "billing_list_refunds",
      "risk_query_risk",
      "risk_get_customer_risk",
    ]);
    const methodCount = DEFAULT_TOOL_SERVICES.reduce((n, s) => n + s.methods.length, 0);
    expect(registry.list()).toHaveLength(methodCount);
  });

  it("names are valid OpenAI function names", () => {
    for (const tool of registry.list()) expect(tool.name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
  });

  it("reads the refund's semantics from its contract options", () => {
    const refund = registry.get("billing_refund");
    expect(refund).toMatchObject({
      tool: "billing",
      effect: Effect.IRREVERSIBLE_EXTERNAL,
      requiredScope: "billing:refund",
      timeoutMs: 2000,
      costMicros: 1000,
      idempotencyKeyField: "idempotencyKey",
      degradation: Degradation.NONE,
      tags: [RoutingTag.DATA_FRESHNESS_CRITICAL],
    });
    expect(refund?.method.name).toBe("Refund");
    expect(refund?.service.typeName).toBe("loopguard.billing.v1.BillingService");
  });

  it("reads a read-only tool's semantics, which has no idempotency key", () => {
    expect(registry.get("kb_search_search")).toMatchObject({
      tool: "kb-search",
      effect: Effect.READ_ONLY,
      requiredScope: "kb:read",
      timeoutMs: 1000,
      costMicros: 100,
      idempotencyKeyField: undefined,
      degradation: Degradation.CACHE_THEN_EMPTY,
      tags: [RoutingTag.LATENCY_SENSITIVE],
    });
    expect(registry.get("risk_query_risk")).toMatchObject({
      requiredScope: "risk:read",
      degradation: Degradation.CACHE,
      tags: [],
    });
  });

  it("warns the model that an irreversible tool may need a human, and only that one", () => {
    expect(registry.get("billing_refund")?.spec.description).toBe(
      "Refund an amount in cents of a paid order to the customer. Irreversible; needs an idempotency key. (irreversible; may need human approval)",
    );
    expect(registry.get("billing_get_order")?.spec.description).toBe(
      "Look up an order: status, amount paid, amount already refunded and what is still refundable.",
    );
    const warned = registry
      .list()
      .filter((t) => t.spec.description.endsWith("(irreversible; may need human approval)"));
    expect(warned.map((t) => t.name)).toEqual(["billing_refund"]);
  });

  it("never shows the host-owned fields to the model: the idempotency key and the amount bound", () => {
    const parameters = registry.get("billing_refund")?.spec.parameters;
    expect(Object.keys(parameters?.properties as object)).toEqual(["orderId", "amountCents", "reason"]);
    expect(JSON.stringify(parameters)).not.toMatch(/idempotency/i);
    expect(JSON.stringify(parameters)).not.toMatch(/maxRefundedTotal/);
  });

  it("returns undefined for a name it does not know", () => {
    expect(registry.get("billing_delete_everything")).toBeUndefined();
    expect(registry.get("Refund")).toBeUndefined();
  });
});

describe("ToolRegistry.specs", () => {
  it("shows every tool when no scopes are given", () => {
    expect(registry.specs().map((s) => s.name)).toHaveLength(6);
  });

  it("shows only the tools the session's scopes allow", () => {
    expect(registry.specs(["kb:read", "billing:read"]).map((s) => s.name)).toEqual([
      "kb_search_search",
      "billing_get_order",
      "billing_list_refunds",
    ]);
    expect(registry.specs(["billing:refund"]).map((s) => s.name)).toEqual(["billing_refund"]);
    expect(registry.specs([])).toEqual([]);
  });

  it("gives the policy name, description and JSON schema only", () => {
    for (const spec of registry.specs())
      expect(Object.keys(spec).sort()).toEqual(["description", "name", "parameters"]);
  });
});

describe("ToolRegistry over other contracts", () => {
  it("derives its tools from whichever services it is given", () => {
    const admin = new ToolRegistry([ToolAdminService]);
    expect(admin.list().map((t) => t.name)).toEqual(["tool_admin_set_faults", "tool_admin_get_faults"]);
    expect(admin.get("tool_admin_set_faults")).toMatchObject({
      effect: Effect.IDEMPOTENT_WRITE,
      requiredScope: "tool:admin",
      costMicros: 0,
    });
    expect(admin.specs(["kb:read"])).toEqual([]);
  });

  it("refuses two methods that map to one model-visible name", () => {
    expect(() => new ToolRegistry([BillingService, BillingService])).toThrow(/share the name billing_get_order/);
  });
});
