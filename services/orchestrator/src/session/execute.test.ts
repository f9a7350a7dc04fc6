import { CallError, status } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { settles } from "./execute.js";

const error = (code: status, reason: string, refusedByTool: boolean) =>
  new CallError({ code, reason, message: "refused", attempts: 1, tool: "billing", method: "Refund", refusedByTool });

describe("what settles whether an irreversible call was made", () => {
  it("the tool's own refusal that does not pass: nothing was made", () => {
    expect(settles(error(status.FAILED_PRECONDITION, "ORDER_NOT_REFUNDABLE", true))).toBe(true);
    expect(settles(error(status.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED", true))).toBe(true);
  });

  it("not the tool's own transient refusal (its ledger did not answer: the effect may have committed), nor a refusal before its handler", () => {
    expect(settles(error(status.UNAVAILABLE, "LEDGER_UNAVAILABLE", true))).toBe(false);
    expect(settles(error(status.UNAVAILABLE, "BREAKER_OPEN", false))).toBe(false);
    expect(settles(error(status.RESOURCE_EXHAUSTED, "OVERLOADED", false))).toBe(false);
  });
});
