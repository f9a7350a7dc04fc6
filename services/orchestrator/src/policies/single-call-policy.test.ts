import { describe, expect, it } from "vitest";
import { ToolRegistry } from "../tool-registry.js";
import { SingleCallPolicy, singleCallScopes, singleCallTask } from "./single-call-policy.js";

const registry = new ToolRegistry();
const tool = (name: string) => registry.get(name)!;

describe("singleCallTask", () => {
  it("names the entity and the amount a refund's arguments carry, so the host's task rules hold the call", () => {
    const args = { orderId: "ord_DEMO00000001", amountCents: 500, reason: "REFUND_REASON_DAMAGED" };
    const task = singleCallTask(tool("billing_refund"), args);
    expect(task).toMatchObject({
      kind: "tool_call",
      tool: "billing_refund",
      order_id: "ord_DEMO00000001",
      amount_cents: 500,
      arguments: args,
    });
  });

  it("keeps personal data out of the stored arguments: the task holds it, the arguments name it by placeholder", () => {
    const task = singleCallTask(tool("risk_query_risk"), { idCard: "110101198003121232", phone: "+8613800138000" });
    expect(task).toMatchObject({ id_card: "110101198003121232", phone: "+8613800138000" });
    expect(task.arguments).toEqual({ idCard: "{{task.id_card}}", phone: "{{task.phone}}" });
  });
});

describe("singleCallScopes", () => {
  it("grants an irreversible call's session the scopes of the host's live reads before it", () => {
    const scopesOf = singleCallScopes(registry);
    expect(scopesOf(tool("billing_refund")).sort()).toEqual(["billing:read", "billing:refund", "risk:read"]);
    expect(scopesOf(tool("kb_search_search"))).toEqual(["kb:read"]);
  });
});

describe("SingleCallPolicy", () => {
  const policy = new SingleCallPolicy();
  const task = singleCallTask(tool("kb_search_search"), { query: "refund policy", limit: 3 });

  it("makes exactly the task's call and states no confidence (it judges nothing)", async () => {
    const decision = await policy.decide({ goal: "g", task, tools: registry.specs(), history: [], step: 1 });
    expect(decision).toMatchObject({
      kind: "tool_calls",
      calls: [{ name: "kb_search_search", arguments: '{"query":"refund policy","limit":3}' }],
    });
    expect(decision).not.toHaveProperty("confidence");
  });

  it("answers with the call's result envelope as JSON once it is observed", async () => {
    const envelope = {
      ok: true,
      data: { hits: [] },
      refs: [],
      costMicros: 0,
      servedFrom: "live" as const,
      observedAt: "2026-12-02T00:00:00.000Z",
    };
    const history = [
      { kind: "call" as const, callId: "call_1_0", tool: "kb_search_search", arguments: "{}" },
      { kind: "observation" as const, callId: "call_1_0", tool: "kb_search_search", envelope },
    ];
    const decision = await policy.decide({ goal: "g", task, tools: [], history, step: 2 });
    expect(decision.kind).toBe("final");
    expect(JSON.parse((decision as { answer: string }).answer)).toEqual(envelope);
  });

  it("answers EINVAL, calling nothing, for a task that names no call", async () => {
    const decision = await policy.decide({ goal: "g", task: { kind: "refund" }, tools: [], history: [], step: 1 });
    expect(decision.kind).toBe("final");
    expect(JSON.parse((decision as { answer: string }).answer).error.code).toBe("EINVAL");
  });
});
