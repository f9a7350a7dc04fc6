import { create, toJson } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  GetOrderResponseSchema,
  OrderStatus,
  RefundReason,
  RefundResponseSchema,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { SearchResponseSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { describe, expect, it } from "vitest";
import type { JsonValue } from "../store/session-store.js";
import { refsOf } from "./world-refs.js";

describe("refsOf, from the contracts' field roles", () => {
  it("cites every search hit with its version", () => {
    const response = create(SearchResponseSchema, {
      hits: [
        { docId: "refund-policy", version: 3, title: "t" },
        { docId: "returns", version: 1, title: "t" },
      ],
    });
    expect(refsOf(SearchResponseSchema, toJson(SearchResponseSchema, response) as JsonValue)).toEqual([
      "kb:refund-policy@3",
      "kb:returns@1",
    ]);
  });

  it("names an order at its ledger version, and its customer", () => {
    const response = create(GetOrderResponseSchema, {
      order: {
        orderId: "ord_DEMO00000001",
        customerId: "cust_demo_0001",
        status: OrderStatus.PAID,
        amountPaidCents: 100n,
        version: 4n,
        createdAt: timestampFromMs(0),
      },
    });
    expect(refsOf(GetOrderResponseSchema, toJson(GetOrderResponseSchema, response) as JsonValue)).toEqual([
      "order:ord_DEMO00000001@4",
      "customer:cust_demo_0001",
    ]);
  });

  it("names a refund and the order it belongs to", () => {
    const response = create(RefundResponseSchema, {
      refund: {
        refundId: "rf_0123456789abcdef",
        orderId: "ord_DEMO00000001",
        amountCents: 5n,
        reason: RefundReason.DAMAGED,
        createdAt: timestampFromMs(0),
      },
    });
    expect(refsOf(RefundResponseSchema, toJson(RefundResponseSchema, response) as JsonValue)).toEqual([
      "refund:rf_0123456789abcdef",
      "order:ord_DEMO00000001",
    ]);
  });
});
