import { clearExtension, create, type DescService, getExtension, setExtension } from "@bufbuild/protobuf";
import type { FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { editedContract } from "@loopguard/tool-sdk/testing";
import {
  BillingService,
  file_loopguard_billing_v1_billing,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { file_loopguard_risk_v1_risk, RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import {
  field,
  FieldPolicySchema,
  method,
  MethodPolicySchema,
} from "@loopguard/proto/gen/loopguard/tool/v1/options_pb";
import { describe, expect, it } from "vitest";
import { declaredEntities, SideEffectRules } from "./side-effects.js";
import { ToolRegistry } from "../tool-registry.js";

const rulesOf =
  (...services: DescService[]) =>
  () =>
    new SideEffectRules(new ToolRegistry(services));

describe("SideEffectRules over the shipped contracts", () => {
  it("guards billing's refund: the order it acts on, the amount, the order's live read and its customer's risk", () => {
    const registry = new ToolRegistry([KbSearchService, BillingService, RiskService]);
    const guard = new SideEffectRules(registry).effectOf(registry.get("billing_refund")!)!;
    expect(guard).toMatchObject({ entity: "order", idField: "orderId", movesMoney: true, amountField: "amountCents" });
    expect(guard.reader).toMatchObject({
      entity: "order",
      idField: "orderId",
      version: ["order", "version"],
      moved: ["order", "amountRefundedCents"],
      available: ["order", "refundableCents"],
    });
    expect(guard.risk?.link).toEqual(["order", "customerId"]);
    expect(guard.risk?.reader.tool.name).toBe("risk_get_customer_risk");
    expect(guard.risk?.reader.riskScore).toEqual(["riskScore"]);
    expect(guard.risk?.reader.approvals).toEqual([
      {
        path: ["riskScore"],
        words: "risk score",
        approval: { setting: "risk", defaultThreshold: 70, maxThreshold: 101 },
      },
    ]);
  });

  it("a task asks for a refund when it states amount_cents: on the orders it names, adding up to that figure", () => {
    const rules = new SideEffectRules(new ToolRegistry([KbSearchService, BillingService, RiskService]));
    expect(rules.askedFor({ order_ids: ["ord_DEMO00000001", "ord_DEMO00000002"], amount_cents: "12000" })).toEqual([
      {
        tool: "billing_refund",
        entity: "order",
        entityIds: ["ord_DEMO00000001", "ord_DEMO00000002"],
        field: "amount_cents",
        figure: 12_000,
      },
    ]);
    expect(rules.askedFor({ order_id: "ord_DEMO00000001", amount_cents: "lots" })[0]?.figure).toBeUndefined();
    expect(rules.askedFor({ order_id: "ord_DEMO00000001" })).toEqual([]);
  });

  it("guards nothing that is not irreversible", () => {
    const registry = new ToolRegistry([KbSearchService, BillingService, RiskService]);
    const rules = new SideEffectRules(registry);
    for (const tool of registry.list().filter((t) => t.name !== "billing_refund"))
      expect(rules.effectOf(tool)).toBeUndefined();
  });
});

describe("a contract that declares a money effect the host cannot guard is refused at startup, saying why", () => {
  const billing = (edit: (proto: FileDescriptorProto) => void) =>
    editedContract(file_loopguard_billing_v1_billing, "loopguard.billing.v1.BillingService", edit);
  const methodOf = (proto: FileDescriptorProto, name: string) => proto.service[0]!.method.find((m) => m.name === name)!;
  const fieldOf = (proto: FileDescriptorProto, message: string, name: string) =>
    proto.messageType.find((m) => m.name === message)!.field.find((f) => f.name === name)!;

  it("an irreversible method without side_effect", () => {
    const service = billing((p) => {
      const options = methodOf(p, "Refund").options!;
      const { sideEffect: _dropped, ...policy } = getExtension(options, method);
      setExtension(options, method, create(MethodPolicySchema, policy));
    });
    expect(rulesOf(KbSearchService, service, RiskService)).toThrow(
      /irreversible method loopguard\.billing\.v1\.BillingService\.Refund must declare its side_effect/,
    );
  });

  it("no live read of the entity (reads_entity missing)", () => {
    const service = billing((p) => {
      const options = methodOf(p, "GetOrder").options!;
      const policy = getExtension(options, method);
      setExtension(options, method, { ...policy, readsEntity: "" });
    });
    expect(rulesOf(KbSearchService, service, RiskService)).toThrow(
      /billing_refund .* moves money but no method declares reads_entity "order"/,
    );
  });

  it("no amount field", () => {
    const service = billing((p) => clearExtension(fieldOf(p, "RefundRequest", "amount_cents").options!, field));
    expect(rulesOf(KbSearchService, service, RiskService)).toThrow(
      /billing_refund .* moves money but no request field has \(field\)\.role = FIELD_ROLE_AMOUNT/,
    );
  });

  it("the entity read gives no amount already moved", () => {
    const service = billing((p) => clearExtension(fieldOf(p, "Order", "amount_refunded_cents").options!, field));
    expect(rulesOf(KbSearchService, service, RiskService)).toThrow(
      /billing_get_order, the live read of "order", gives no moved/,
    );
  });

  it("no customer whose risk the host can read", () => {
    const risk = editedContract(file_loopguard_risk_v1_risk, "loopguard.risk.v1.RiskService", (p) => {
      const options = p.service[0]!.method.find((m) => m.name === "GetCustomerRisk")!.options!;
      setExtension(options, method, { ...getExtension(options, method), readsEntity: "" });
    });
    expect(rulesOf(KbSearchService, BillingService, risk)).toThrow(
      /links to no entity whose live read gives a FIELD_ROLE_RISK_SCORE/,
    );
  });

  it("a risk score with no approval threshold to compare it with", () => {
    const risk = editedContract(file_loopguard_risk_v1_risk, "loopguard.risk.v1.RiskService", (p) => {
      const score = p.messageType.find((m) => m.name === "GetCustomerRiskResponse")!.field[0]!;
      const { approval: _dropped, ...policy } = getExtension(score.options!, field);
      setExtension(score.options!, field, create(FieldPolicySchema, policy));
    });
    expect(rulesOf(KbSearchService, BillingService, risk)).toThrow(
      /risk_get_customer_risk gives a FIELD_ROLE_RISK_SCORE without \(field\)\.approval/,
    );
  });
});

describe("declaredEntities", () => {
  it("reads <entity>_id and <entity>_ids, snake or camel case", () => {
    expect(declaredEntities({ order_id: "a" }, "order")).toEqual(["a"]);
    expect(declaredEntities({ orderIds: ["a", "b", 3] }, "order")).toEqual(["a", "b"]);
    expect(declaredEntities({ customer_id: "c" }, "order")).toEqual([]);
  });
});
