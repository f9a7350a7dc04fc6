import { describe, expect, it } from "vitest";
import { RetryBudget } from "./retry.js";

describe("RetryBudget", () => {
  it("lets hedges spend only the upper half, keeping the lower half for retries of failures", () => {
    const budget = new RetryBudget(0.1, 10);
    let hedges = 0;
    while (budget.tryHedge()) hedges++;
    expect(hedges).toBe(5);
    let retries = 0;
    while (budget.tryRetry()) retries++;
    expect(retries).toBe(5);
  });

  it("refills by its ratio per request, up to its size", () => {
    const budget = new RetryBudget(0.5, 2);
    expect([budget.tryRetry(), budget.tryRetry(), budget.tryRetry()]).toEqual([true, true, false]);
    budget.onRequest();
    budget.onRequest();
    expect(budget.tryRetry()).toBe(true);
    for (let i = 0; i < 10; i++) budget.onRequest();
    expect(budget.tokens).toBe(2);
  });
});
