// The smoke calls the contracts declare, and how a run of them is judged.
import { contractFiles } from "@loopguard/proto";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { describe, expect, it } from "vitest";
import { servicePolicy, toolServicesOf } from "./contract.js";
import { status } from "./errors.js";
import {
  allowedFailures,
  describeSmoke,
  minCallsToJudge,
  type SmokeResult,
  smokeCallOf,
  smokeCount,
  smokePassed,
} from "./smoke.js";

const result = (calls: number, failures: Record<string, number>): SmokeResult => ({
  tool: "billing",
  method: "GetOrder",
  calls,
  failed: Object.values(failures).reduce((a, b) => a + b, 0),
  failures,
  latenciesMs: Array.from({ length: calls }, (_, i) => i / 10),
});

describe("smoke calls", () => {
  it("every tool contract declares one: a read-only method and a request that meets its contract, answered alike with or without demo data", () => {
    const calls = toolServicesOf(contractFiles).map(smokeCallOf);
    expect(calls.map((c) => [c.tool, c.method.name, c.scope])).toEqual([
      ["kb-search", "Search", "kb:read"],
      ["billing", "GetOrder", "billing:read"],
      ["risk", "GetCustomerRisk", "risk:read"],
    ]);
    expect(calls.map((c) => c.request)).toEqual([
      expect.objectContaining({ query: "refund policy", limit: 3 }),
      expect.objectContaining({ orderId: "ord_SMOKE0000000" }),
      expect.objectContaining({ customerId: "cust_smoke_absent" }),
    ]);
    expect(calls.map((c) => status[c.expectCode])).toEqual(["OK", "NOT_FOUND", "NOT_FOUND"]);
  });

  it("refuses a contract without one, naming the option", () => {
    expect(() => smokeCallOf(ToolAdminService)).toThrow(
      `loopguard.tool.v1.ToolAdminService option (loopguard.tool.v1.service).smoke_check is missing: a release cannot judge ${servicePolicy(ToolAdminService).toolName} without a call to send it`,
    );
  });

  it("are judged on at least 1 / budget calls (one failure must not spend the whole budget), 20 at least, and sent twice that often", () => {
    expect([0.005, 0.01, 0.02, 0.5].map(minCallsToJudge)).toEqual([200, 100, 50, 20]);
    expect(toolServicesOf(contractFiles).map((s) => smokeCount(smokeCallOf(s)))).toEqual([200, 400, 100]);
  });

  it("pass when no more failed than a version within its budget would (3 standard deviations), and never without a call", () => {
    // 400 calls at 0.5 %: 2 expected, 1.4 the standard deviation.
    expect(allowedFailures(400, 0.005)).toBe(6);
    expect(smokePassed(result(400, { DEADLINE_EXCEEDED: 6 }), 0.005)).toBe(true);
    expect(smokePassed(result(400, { UNAVAILABLE: 7 }), 0.005)).toBe(false);
    expect(smokePassed(result(0, {}), 0.005)).toBe(false);
    expect(describeSmoke(result(400, { UNAVAILABLE: 121, DEADLINE_EXCEEDED: 2 }), 0.005)).toBe(
      "smoke billing GetOrder: 123 of 400 calls failed (UNAVAILABLE × 121, DEADLINE_EXCEEDED × 2), 6 allowed at a 0.5 % error rate; p95 37.9 ms",
    );
  });
});
