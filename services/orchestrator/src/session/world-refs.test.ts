import { create, type DescMessage, type MessageInitShape, toJson } from "@bufbuild/protobuf";
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
import { entitiesOf, refsOf } from "./world-refs.js";

/** The refs of a response built from `init`, read from its JSON as the session records it. */
function refsOfResponse<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>) {
  return refsOf(schema, toJson(schema, create(schema, init)) as JsonValue);
}

describe("refsOf, from the contracts' field roles", () => {
  it("cites every search hit with its version", () => {
    const refs = refsOfResponse(SearchResponseSchema, {
      hits: [
        { docId: "refund-policy", version: 3, title: "t" },
        { docId: "returns", version: 1, title: "t" },
      ],
    });
    expect(refs).toEqual(["kb:refund-policy@3", "kb:returns@1"]);
  });

  it("names an order at its ledger version, and its customer", () => {
    const refs = refsOfResponse(GetOrderResponseSchema, {
      order: {
        orderId: "ord_DEMO00000001",
        customerId: "cust_demo_0001",
        status: OrderStatus.PAID,
        amountPaidCents: 100n,
        version: 4n,
        createdAt: timestampFromMs(0),
      },
    });
    expect(refs).toEqual(["order:ord_DEMO00000001@4", "customer:cust_demo_0001"]);
  });

  it("names a refund and the order it belongs to", () => {
    const refs = refsOfResponse(RefundResponseSchema, {
      refund: {
        refundId: "rf_0123456789abcdef",
        orderId: "ord_DEMO00000001",
        amountCents: 5n,
        reason: RefundReason.DAMAGED,
        createdAt: timestampFromMs(0),
      },
    });
    expect(refs).toEqual(["refund:rf_0123456789abcdef", "order:ord_DEMO00000001"]);
  });
});

describe("entitiesOf, the refs' entities without versions", () => {
  it("keeps an '@' inside an id and leaves only a version field's value off", () => {
    const init = {
      order: {
        orderId: "ord_DEMO00000002",
        customerId: "cust_demo_0008@shop.example",
        status: OrderStatus.PAID,
        amountPaidCents: 100n,
        version: 1n,
        createdAt: timestampFromMs(0),
      },
    };
    const data = toJson(GetOrderResponseSchema, create(GetOrderResponseSchema, init)) as JsonValue;
    expect(refsOf(GetOrderResponseSchema, data)).toEqual([
      "order:ord_DEMO00000002@1",
      "customer:cust_demo_0008@shop.example",
    ]);
    expect(entitiesOf(GetOrderResponseSchema, data)).toEqual([
      "order:ord_DEMO00000002",
      "customer:cust_demo_0008@shop.example",
    ]);
  });
});
