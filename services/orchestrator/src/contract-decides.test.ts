// What the engine knows about a tool comes from its contract: a throwaway edit of a shipped
// contract's options changes what is logged, which answers are accepted and which threshold a
// value is compared with, with no edit to the engine.
import { create, type DescService, getExtension, setExtension } from "@bufbuild/protobuf";
import type { FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import {
  BillingService,
  file_loopguard_billing_v1_billing,
} from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { file_loopguard_kb_v1_kb, KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { file_loopguard_risk_v1_risk, RiskService } from "@loopguard/proto/gen/loopguard/risk/v1/risk_pb";
import { field, FieldPolicySchema } from "@loopguard/proto/gen/loopguard/tool/v1/options_pb";
import { createLogger, type FieldPolicy } from "@loopguard/tool-sdk";
import { editedContract } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { DEFAULT_APPROVAL_RULES, thresholdOf } from "./guard/approvals.js";
import { SideEffectRules } from "./guard/side-effects.js";
import type { HistoryItem } from "./policies/policy.js";
import { checkAnswer } from "./session/answer.js";
import { ToolRegistry } from "./tool-registry.js";

/** `file`'s service after the field options of `message.fieldName` were changed by `change`. */
function withFieldPolicy(
  file: typeof file_loopguard_kb_v1_kb,
  service: string,
  message: string,
  fieldName: string,
  change: (policy: FieldPolicy) => Partial<FieldPolicy>,
): DescService {
  return editedContract(file, service, (proto: FileDescriptorProto) => {
    const f = proto.messageType.find((m) => m.name === message)!.field.find((g) => g.name === fieldName)!;
    const policy = getExtension(f.options!, field);
    setExtension(f.options!, field, create(FieldPolicySchema, { ...policy, ...change(policy) }));
  });
}

function loggedQuery(contracts: readonly DescService[]): unknown {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({ service: "t", contracts, write: (l) => lines.push(JSON.parse(l)) });
  log.info("search", { query: "refund policy" });
  return lines[0]!.query;
}

const observedOrder: HistoryItem[] = [
  {
    kind: "observation",
    callId: "c1",
    tool: "billing_get_order",
    envelope: {
      ok: true,
      data: {},
      refs: ["order:ord_AAAAAAAAAAAA@1"],
      costMicros: 0,
      servedFrom: "live",
      observedAt: "",
    },
  },
];

describe("a contract's options decide the engine's behaviour", () => {
  it("log_safe: a field the contract declares log-safe is written, as it is not before", () => {
    expect(loggedQuery([KbSearchService])).toBe("[redacted]");
    const kb = withFieldPolicy(file_loopguard_kb_v1_kb, KbSearchService.typeName, "SearchRequest", "query", () => ({
      logSafe: true,
    }));
    expect(loggedQuery([kb])).toBe("refund policy");
  });

  it("citation: ids with a declared prefix are checked against what tools returned", () => {
    const answer = "Order ord_BBBBBBBBBBBB cannot be refunded.";
    expect(checkAnswer(answer, observedOrder, new ToolRegistry([BillingService]).citations)).toBeUndefined();
    const billing = withFieldPolicy(
      file_loopguard_billing_v1_billing,
      BillingService.typeName,
      "Order",
      "order_id",
      () => ({ citation: { $typeName: "loopguard.tool.v1.Citation", idPrefix: "ord_", atVersion: false } }),
    );
    const citations = new ToolRegistry([billing]).citations;
    expect(checkAnswer(answer, observedOrder, citations)).toBe(
      "the answer cites order ord_BBBBBBBBBBBB, which no tool returned",
    );
    expect(checkAnswer("Order ord_AAAAAAAAAAAA was read.", observedOrder, citations)).toBeUndefined();
  });

  it("approval: the setting and default threshold a value is compared with are the contract's", () => {
    const gateOf = (risk: DescService) => {
      const registry = new ToolRegistry([BillingService, risk]);
      return new SideEffectRules(registry).effectOf(registry.get("billing_refund")!)!.risk!.reader.approvals[0]!;
    };
    expect(thresholdOf(DEFAULT_APPROVAL_RULES, gateOf(RiskService).approval)).toBe(70);
    const risk = withFieldPolicy(
      file_loopguard_risk_v1_risk,
      RiskService.typeName,
      "GetCustomerRiskResponse",
      "risk_score",
      (policy) => ({ approval: { ...policy.approval!, setting: "fraud", defaultThreshold: 40n } }),
    );
    const gate = gateOf(risk);
    expect(gate.approval.setting).toBe("fraud");
    expect(thresholdOf(DEFAULT_APPROVAL_RULES, gate.approval)).toBe(40);
    expect(thresholdOf({ ...DEFAULT_APPROVAL_RULES, thresholds: { fraud: 55 } }, gate.approval)).toBe(55);
  });
});
