// A model endpoint that reports a prompt far past the session's token budget: the session is charged
// what the host believes of the report (twice its own count of the prompt), which passes the budget,
// and the refund the reply asks for is not made; the session stops max_tokens. A fake
// OpenAI-compatible endpoint on the real wire protocol, real tools (the ledger read back directly),
// a real orchestrator in process.
import { describe, expect, it } from "vitest";
import { chatCompletion } from "./fake-chat-server.js";
import { ALL_SCOPES, waitForSession } from "./harness.js";
import { moneyFixture } from "./money-fixture.js";

const { withModel, refundsOf } = moneyFixture();

const ORDER = "ord_DEMO00000001";
/**
 * A task of some 2,000 tokens, so the prompt (about 2,700) and the reply's reserve (1,024) fit the
 * budget below, and twice the prompt does not.
 */
const TASK = { kind: "refund", order_id: ORDER, amount_cents: 700, note: "word ".repeat(2000) };
const MAX_TOKENS = 4500;

describe("a prompt reported far past the token budget", () => {
  it("the refund its reply asks for is not made: the session stops max_tokens, charged and saying why", async () => {
    const { orch, chat } = await withModel([
      () =>
        chatCompletion({
          toolCalls: [
            {
              id: "r1",
              name: "billing_refund",
              arguments: JSON.stringify({ orderId: ORDER, amountCents: 700, reason: "REFUND_REASON_DAMAGED" }),
            },
          ],
          usage: { prompt_tokens: 120_000, completion_tokens: 10 },
        }),
      () => chatCompletion({ content: "Refunded 7.00." }),
    ]);
    const { session } = await orch.api.startSession({
      goal: `Refund 7.00 of ${ORDER}`,
      task: TASK,
      scopes: ALL_SCOPES,
      policy: "openai",
      budget: { maxTokens: BigInt(MAX_TOKENS) },
    });
    const done = await waitForSession(orch.api, session!.sessionId, undefined, 60_000);

    expect(done.stopReason).toBe("max_tokens");
    expect(done.answer).toMatch(/^stopped before calling billing_refund: max tokens reached/);
    expect(await refundsOf(ORDER)).toHaveLength(0);
    expect(chat.requests).toHaveLength(1);

    const trace = (await orch.api.getTrace({ sessionId: done.sessionId })).records.map(
      (r) => JSON.parse(r) as { context?: { tokens: number } },
    );
    const counted = trace.find((r) => r.context)!.context!.tokens;
    expect(counted + 1024).toBeLessThanOrEqual(MAX_TOKENS);
    // The reply could not have been written past the budget: its max tokens fit what the prompt left.
    expect(chat.requests[0]!.body.max_tokens).toBeLessThanOrEqual(MAX_TOKENS - counted);
    // The call's spend is recorded, past the budget: real usage is not hidden, as far as it is believed
    // (the 120,000 reported is not: twice the prompt, and the reply's few tokens).
    const tokens = Number(done.usage!.tokens);
    expect(tokens).toBeGreaterThanOrEqual(MAX_TOKENS);
    expect(tokens).toBeGreaterThan(2 * counted);
    expect(tokens).toBeLessThan(2 * counted + 100);
    expect(done.usage!.toolCalls).toBe(0);
  });
});
