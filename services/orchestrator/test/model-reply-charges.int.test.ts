// A model endpoint that reports far fewer completion tokens than its reply holds is charged the
// host's own count of everything the model wrote: the text beside its tool calls, and the whole
// answer, not only the part the host keeps, up to the max tokens the host sent, past which no model
// writes. A fake OpenAI-compatible endpoint on the real wire protocol, real tools, a real orchestrator
// in process.
import { describe, expect, it } from "vitest";
import { chatCompletion } from "./fake-chat-server.js";
import { ALL_SCOPES, waitForSession } from "./harness.js";
import { moneyFixture } from "./money-fixture.js";

const { withModel } = moneyFixture();

async function tokensCharged(orch: Awaited<ReturnType<typeof withModel>>["orch"]): Promise<number> {
  const { session } = await orch.api.startSession({
    goal: "How do refunds work?",
    task: {},
    scopes: ALL_SCOPES,
    policy: "openai",
  });
  const done = await waitForSession(orch.api, session!.sessionId, undefined, 60_000);
  expect(done.stopReason).toBe("done");
  return Number(done.usage!.tokens);
}

describe("a reply's tokens, reported as 1", () => {
  it("900 tokens of text beside a tool call are charged", async () => {
    const { orch } = await withModel([
      () =>
        chatCompletion({
          content: "word ".repeat(900),
          toolCalls: [{ id: "c1", name: "kb_search_search", arguments: '{"query":"refund policy","limit":3}' }],
          usage: { prompt_tokens: 1000, completion_tokens: 1 },
        }),
      () => chatCompletion({ content: "Refunds take 5 days.", usage: { prompt_tokens: 1100, completion_tokens: 40 } }),
    ]);
    // The two prompts and the answer as reported, and the ~900 tokens the host counts beside the call.
    expect(await tokensCharged(orch)).toBeGreaterThanOrEqual(1000 + 1140 + 800);
  });

  it("a 120 KB answer is charged the whole max tokens sent, not the 8 KiB the host keeps nor tokens past the max", async () => {
    const { orch, chat } = await withModel([
      () => chatCompletion({ content: "word ".repeat(24_000), usage: { prompt_tokens: 1000, completion_tokens: 1 } }),
    ]);
    const tokens = await tokensCharged(orch);
    expect(chat.requests[0]!.body.max_tokens).toBe(1024);
    expect(tokens).toBe(1000 + 1024);
  });
});
