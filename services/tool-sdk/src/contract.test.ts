import { clone, create, type DescMethod, getOption, setExtension } from "@bufbuild/protobuf";
import { MethodOptionsSchema } from "@bufbuild/protobuf/wkt";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { HedgeSchema, method as methodOption } from "@loopguard/proto/gen/loopguard/tool/v1/options_pb";
import { describe, expect, it } from "vitest";
import { methodPolicy } from "./contract.js";

/** The same method with its (loopguard.tool.v1.method) option set to `hedge`, as a contract author might write it. */
function withHedge(method: DescMethod, hedge: { enabled: boolean }): DescMethod {
  const options = clone(MethodOptionsSchema, method.proto.options ?? ({} as never));
  setExtension(options, methodOption, { ...getOption(method, methodOption), hedge: create(HedgeSchema, hedge) });
  return Object.create(method, { proto: { value: { ...method.proto, options } } }) as DescMethod;
}

describe("the hedge option", () => {
  it("refuses a hedged method that is not read-only, naming it", () => {
    expect(() => methodPolicy(withHedge(BillingService.method.refund, { enabled: true }))).toThrow(
      "method loopguard.billing.v1.BillingService.Refund sets option hedge but is not EFFECT_READ_ONLY: only reads may be hedged",
    );
  });

  it("accepts the contracts' hedged reads, and Refund unhedged", () => {
    expect(methodPolicy(KbSearchService.method.search).hedge?.enabled).toBe(true);
    expect(methodPolicy(BillingService.method.getOrder).hedge?.enabled).toBe(true);
    expect(methodPolicy(BillingService.method.refund).hedge?.enabled ?? false).toBe(false);
  });
});
