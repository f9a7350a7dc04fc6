import { create, type DescService, getExtension, setExtension } from "@bufbuild/protobuf";
import {
  BillingService,
  file_loopguard_billing_v1_billing,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { file_loopguard_kb_v1_kb, KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { file_loopguard_risk_v1_risk, RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { type FieldPolicy, FieldPolicySchema, field } from "@loopguard/proto/gen/loopguard/tool/v1/options_pb";
import { describe, expect, it } from "vitest";
import { editedContract } from "../testing/edited-contract.js";
import { approvalFieldsOf, citationsOf, logSafeFieldsOf } from "./contract.js";

/** `file`'s service with the field options of `message.fieldName` changed, as a contract author might. */
function withField(
  file: typeof file_loopguard_kb_v1_kb,
  service: DescService,
  at: readonly [message: string, field: string],
  change: Partial<FieldPolicy>,
): DescService {
  return editedContract(file, service.typeName, (proto) => {
    const f = proto.messageType.find((m) => m.name === at[0])!.field.find((g) => g.name === at[1])!;
    setExtension(f.options!, field, create(FieldPolicySchema, { ...getExtension(f.options!, field), ...change }));
  });
}

const citation = (idPrefix: string, atVersion: boolean) =>
  ({ $typeName: "loopguard.tool.v1.Citation", idPrefix, atVersion }) as const;

describe("the field options the engine reads", () => {
  it("reads the shipped contracts' log-safe fields, citations and approval settings", () => {
    const tools = [KbSearchService, BillingService, RiskService];
    expect([...logSafeFieldsOf(tools)].sort()).toEqual([
      "doc_id",
      "next_page_token",
      "order_id",
      "page_token",
      "refund_id",
    ]);
    expect(citationsOf(tools)).toEqual([
      { entity: "kb", idPrefix: "", atVersion: true },
      { entity: "refund", idPrefix: "rf_", atVersion: false },
    ]);
    expect(approvalFieldsOf(tools)).toEqual([{ setting: "risk", defaultThreshold: 70, maxThreshold: 101 }]);
  });

  it("refuses a citation on a field that is not an entity id, naming it", () => {
    const kb = withField(file_loopguard_kb_v1_kb, KbSearchService, ["SearchHit", "title"], {
      citation: citation("t_", false),
    });
    expect(() => citationsOf([kb])).toThrow(/loopguard\.kb\.v1\.SearchHit\.title declares a citation but is not/);
  });

  it("refuses a citation that sets both forms, or a prefix no regular expression can hold as text", () => {
    const both = withField(file_loopguard_billing_v1_billing, BillingService, ["Refund", "refund_id"], {
      citation: citation("rf_", true),
    });
    expect(() => citationsOf([both])).toThrow(/must set exactly one of citation\.id_prefix and citation\.at_version/);
    const pattern = withField(file_loopguard_billing_v1_billing, BillingService, ["Refund", "refund_id"], {
      citation: citation("rf.*", false),
    });
    expect(() => citationsOf([pattern])).toThrow(/citation\.id_prefix must be letters, digits/);
  });

  it("refuses an approval whose default is above its largest threshold", () => {
    const risk = withField(file_loopguard_risk_v1_risk, RiskService, ["GetCustomerRiskResponse", "risk_score"], {
      approval: {
        $typeName: "loopguard.tool.v1.Approval",
        setting: "risk",
        defaultThreshold: 200n,
        maxThreshold: 101n,
      },
    });
    expect(() => approvalFieldsOf([risk])).toThrow(/approval\.default_threshold must be within 0\.\.max_threshold/);
  });
});
