import {
  GetOrderRequestSchema,
  GetOrderResponseSchema,
  ListRefundsRequestSchema,
  RefundRequestSchema,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { SearchRequestSchema, SearchResponseSchema } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { QueryRiskRequestSchema, QueryRiskResponseSchema } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { SetFaultsRequestSchema } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { describe, expect, it } from "vitest";
import { requestSchema } from "./json-schema.js";

const refundReasons = [
  "REFUND_REASON_DAMAGED",
  "REFUND_REASON_NOT_DELIVERED",
  "REFUND_REASON_WRONG_ITEM",
  "REFUND_REASON_CUSTOMER_REQUEST",
  "REFUND_REASON_DUPLICATE_CHARGE",
];

describe("requestSchema of the tool requests", () => {
  it("kb search: query 1..512 characters and limit an integer 1..10, both required", () => {
    expect(requestSchema(SearchRequestSchema)).toEqual({
      type: "object",
      properties: {
        query: { type: "string", minLength: 1, maxLength: 512 },
        limit: { type: "integer", minimum: 1, maximum: 10 },
      },
      required: ["query", "limit"],
      additionalProperties: false,
    });
  });

  it("billing refund without its host-owned fields: order id pattern, amount 1..500000 cents, reason names without UNSPECIFIED", () => {
    expect(requestSchema(RefundRequestSchema, { omit: ["idempotencyKey", "maxRefundedTotalCents", "dryRun"] })).toEqual(
      {
        type: "object",
        properties: {
          orderId: { type: "string", pattern: "^ord_[A-Za-z0-9]{12}$" },
          amountCents: { type: "integer", minimum: 1, maximum: 500000 },
          reason: { type: "string", enum: refundReasons },
        },
        required: ["orderId", "amountCents", "reason"],
        additionalProperties: false,
      },
    );
  });

  it("billing refund with its idempotency key shows the key's rules and requires it", () => {
    const schema = requestSchema(RefundRequestSchema);
    expect(schema.properties).toMatchObject({
      idempotencyKey: { type: "string", minLength: 16, maxLength: 64, pattern: "^[A-Za-z0-9_.:-]+$" },
    });
    expect(schema.required).toContain("idempotencyKey");
  });

  it("billing get order and list refunds require an order id, because its pattern rejects the empty string", () => {
    const orderId = { type: "string", pattern: "^ord_[A-Za-z0-9]{12}$" };
    expect(requestSchema(GetOrderRequestSchema)).toEqual({
      type: "object",
      properties: { orderId },
      required: ["orderId"],
      additionalProperties: false,
    });
    // The page fields are optional: a first page needs neither.
    expect(requestSchema(ListRefundsRequestSchema)).toEqual({
      type: "object",
      properties: {
        orderId,
        pageSize: { type: "integer", minimum: 0, maximum: 1000 },
        pageToken: { type: "string", maxLength: 128, pattern: "^[A-Za-z0-9_-]*$" },
      },
      required: ["orderId"],
      additionalProperties: false,
    });
  });

  it("risk query: id card exactly 18 characters of the GB 11643 alphabet, phone 11..20 characters", () => {
    expect(requestSchema(QueryRiskRequestSchema)).toEqual({
      type: "object",
      properties: {
        idCard: { type: "string", minLength: 18, maxLength: 18, pattern: "^[0-9]{17}[0-9Xx]$" },
        phone: { type: "string", minLength: 11, maxLength: 20, pattern: "^[+0-9 ()-]+$" },
      },
      required: ["idCard", "phone"],
      additionalProperties: false,
    });
  });

  it("patterns are ECMA-262 regular expressions that keep their meaning", () => {
    const properties = requestSchema(RefundRequestSchema).properties as Record<string, { pattern: string }>;
    const orderId = new RegExp(properties.orderId?.pattern ?? "", "u");
    expect(orderId.test("ord_A1b2C3d4E5f6")).toBe(true);
    expect(orderId.test("ord_short")).toBe(false);
    expect(orderId.test("")).toBe(false);
  });
});

describe("requestSchema of other shapes", () => {
  it("nested messages become objects, Timestamp a date-time string, required=true a required property", () => {
    const schema = requestSchema(GetOrderResponseSchema);
    expect(schema.required).toEqual(["order"]);
    const order = (schema.properties as Record<string, Record<string, unknown>>).order;
    expect(order).toMatchObject({
      type: "object",
      additionalProperties: false,
      properties: {
        status: {
          type: "string",
          enum: ["ORDER_STATUS_PENDING", "ORDER_STATUS_PAID", "ORDER_STATUS_CANCELLED", "ORDER_STATUS_REFUNDED"],
        },
        amountPaidCents: { type: "integer", minimum: 0 },
        createdAt: { type: "string", format: "date-time" },
        version: { type: "integer", minimum: 0 },
      },
    });
    expect(order?.required).toEqual(["orderId", "customerId", "status", "currency", "createdAt"]);
  });

  it("repeated fields become arrays with maxItems and item rules", () => {
    expect(requestSchema(QueryRiskResponseSchema).properties).toEqual({
      riskScore: { type: "integer", minimum: -1, maximum: 100 },
      reason: { type: "string", minLength: 1, maxLength: 200 },
      factors: { type: "array", items: { type: "string", maxLength: 64 }, maxItems: 10 },
    });
    expect(requestSchema(SearchResponseSchema).properties).toMatchObject({
      hits: { type: "array", maxItems: 10, items: { type: "object", required: ["docId", "version", "title"] } },
    });
  });

  it("doubles become numbers with their bounds; fields without rules are optional", () => {
    const schema = requestSchema(SetFaultsRequestSchema);
    expect(schema.required).toEqual(["profile"]);
    expect(schema.properties).toMatchObject({
      profile: {
        properties: {
          errorRate: { type: "number", minimum: 0, maximum: 1 },
          outage: { type: "boolean" },
          addedLatencyMs: { type: "integer", minimum: 0, maximum: 60000 },
          methods: { type: "array", maxItems: 32, items: { type: "string", minLength: 1, maxLength: 64 } },
        },
        required: [],
      },
    });
  });
});
