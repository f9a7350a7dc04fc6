import { describe, expect, it } from "vitest";
import type { Usage } from "../store/session-store.js";
import { budgetOf, refuseToolCall } from "./budget.js";

const limits = budgetOf({ maxTokens: 1000, maxCostMicros: 500 });
const used = (tokens: number, costMicros: number): Usage => ({
  steps: 1,
  toolCalls: 0,
  tokens,
  costMicros,
  startedAt: 0,
});

describe("refuseToolCall", () => {
  it("makes a free call while the budgets have room", () => {
    expect(refuseToolCall(used(999, 499), limits, 0, 1)).toBeNull();
  });

  it("refuses any call, a free one too, once the session is at or over its token budget", () => {
    expect(refuseToolCall(used(1000, 0), limits, 0, 1)).toBe("max_tokens");
    expect(refuseToolCall(used(120_010, 0), limits, 0, 1)).toBe("max_tokens");
  });

  it("refuses any call, a free one too, once the session is at or over its money budget", () => {
    expect(refuseToolCall(used(0, 500), limits, 0, 1)).toBe("max_cost");
    expect(refuseToolCall(used(0, 499), limits, 2, 1)).toBe("max_cost");
  });
});
