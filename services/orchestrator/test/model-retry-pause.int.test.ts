// The pause before a model call's retry (the endpoint's Retry-After, up to 5 s) is taken only within
// the session's wall clock: a pause that would end past it stops the session `deadline` at once, with
// no retry counted, rather than waiting out a retry that could never be made.
import { describe, expect, it } from "vitest";
import { chatCompletion } from "./fake-chat-server.js";
import { ALL_SCOPES, waitForSession } from "./harness.js";
import { moneyFixture } from "./money-fixture.js";

const { withModel } = moneyFixture();

async function run(retryAfter: string, maxWallClockMs: number) {
  // Rate-limited once, then answers.
  const { orch, chat } = await withModel([
    () => ({ status: 429, headers: { "retry-after": retryAfter }, body: { error: { message: "slow down" } } }),
    () => chatCompletion({ content: "Refunds take 5 days." }),
  ]);
  const started = Date.now();
  const { session } = await orch.api.startSession({
    goal: "How do refunds work?",
    task: { kind: "question" },
    scopes: ALL_SCOPES,
    policy: "openai",
    budget: { maxWallClockMs },
  });
  const done = await waitForSession(orch.api, session!.sessionId, undefined, 30_000);
  return { done, requests: chat.requests, ms: Date.now() - started };
}

describe("a model's Retry-After", () => {
  it("past the session's deadline stops it `deadline` at once, no retry counted", async () => {
    const { done, requests, ms } = await run("5", 2500);
    expect(done.stopReason).toBe("deadline");
    expect(done.answer).toMatch(
      /HTTP 429.*not retried: its pause of 5000 ms before a retry would end past the session's deadline/,
    );
    expect(done.usage!.retries).toBe(0);
    expect(done.usage!.wallClockMs).toBeLessThan(2500);
    expect(requests).toHaveLength(1);
    expect(ms).toBeLessThan(2500);
  }, 30_000);

  it("within the session's wall clock is waited out, and the call retried", async () => {
    const { done, requests } = await run("1", 20_000);
    expect(done.stopReason).toBe("done");
    expect(done.usage!.retries).toBe(1);
    expect(requests).toHaveLength(2);
  }, 30_000);
});
