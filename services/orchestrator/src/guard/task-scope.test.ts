import { create, toJson } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { GetOrderResponseSchema, OrderStatus } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { describe, expect, it } from "vitest";
import type { HistoryItem } from "../policies/policy.js";
import type { JsonValue } from "../store/session-store.js";
import { refsOf } from "../session/world-refs.js";
import { ToolRegistry } from "../tool-registry.js";
import { outOfTask } from "./task-scope.js";

const registry = new ToolRegistry();
const getOrder = registry.get("billing_get_order")!;
const customerRisk = registry.get("risk_get_customer_risk")!;
const outputOf = (name: string) => registry.get(name)?.method.output;
const task = { kind: "refund", order_id: "ord_DEMO00000002", amount_cents: 100 };

/** A session that has read the task's order, whose customer is `customerId`, at ledger version 1. */
function afterGetOrder(customerId: string, tool = getOrder.name): HistoryItem[] {
  const data = toJson(
    GetOrderResponseSchema,
    create(GetOrderResponseSchema, {
      order: {
        orderId: "ord_DEMO00000002",
        customerId,
        status: OrderStatus.PAID,
        amountPaidCents: 100n,
        version: 1n,
        createdAt: timestampFromMs(0),
      },
    }),
  ) as JsonValue;
  return [
    { kind: "call", callId: "c1", tool, arguments: '{"orderId":"ord_DEMO00000002"}' },
    {
      kind: "observation",
      callId: "c1",
      tool,
      envelope: {
        ok: true,
        data,
        refs: refsOf(GetOrderResponseSchema, data),
        costMicros: 0,
        servedFrom: "live",
        observedAt: new Date(0).toISOString(),
      },
    },
  ];
}

const readRisk = (customerId: string, history: HistoryItem[]) =>
  outOfTask(customerRisk, { customerId }, task, history, outputOf);

describe("outOfTask: the entities a read may name", () => {
  it("lets the model read the customer the task's order links to, and no other", () => {
    const history = afterGetOrder("cust_demo_0001");
    expect(readRisk("cust_demo_0001", history)).toBeUndefined();
    expect(readRisk("cust_demo_0002", history)?.message).toMatch(/does not name/);
    expect(readRisk("cust_demo_0001", [])?.message).toMatch(/no answer so far links to/);
  });

  it("reads a linked id holding '@' whole: its own customer, never the one named by the part before '@'", () => {
    const history = afterGetOrder("cust_demo_0008@shop.example");
    expect(history[1]).toMatchObject({
      envelope: { refs: ["order:ord_DEMO00000002@1", "customer:cust_demo_0008@shop.example"] },
    });
    expect(readRisk("cust_demo_0008@shop.example", history)).toBeUndefined();
    expect(readRisk("cust_demo_0008", history)?.message).toMatch(
      /reads customer cust_demo_0008, which the task does not name/,
    );
  });

  it("leaves the version off a versioned id: the order read at version 1 is the order", () => {
    const history = afterGetOrder("cust_demo_0001");
    expect(outOfTask(getOrder, { orderId: "ord_DEMO00000002" }, {}, history, outputOf)).toBeUndefined();
    expect(outOfTask(getOrder, { orderId: "ord_DEMO00000002@1" }, {}, history, outputOf)?.message).toMatch(
      /does not name/,
    );
  });

  it("takes from an answer of a tool it has no message for only the refs that cannot be read two ways", () => {
    const history = afterGetOrder("cust_demo_0008@shop.example", "other_get_order");
    expect(readRisk("cust_demo_0008", history)).toBeDefined();
    expect(readRisk("cust_demo_0008@shop.example", history)).toBeDefined();
    expect(readRisk("cust_demo_0001", afterGetOrder("cust_demo_0001", "other_get_order"))).toBeUndefined();
  });
});
