// A model endpoint that answers 200 with a body holding no choices[0].message: the model read the
// prompt, and each such call is charged, what the body reports as far as the host believes it, else
// the prompt as the host counted it; the retries end by the retry budget or the token budget, saying
// so. A fake OpenAI-compatible endpoint on the real wire protocol, a real orchestrator in process.
import { describe, expect, it } from "vitest";
import { type ReceivedRequest, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, useSuite, waitForSession } from "./harness.js";

const MODEL = "gpt-4o-mini";

/** The endpoint's body, by the session goal's first word. */
const BODIES: Record<string, unknown> = {
  empty: { choices: [] },
  reported: { choices: [], usage: { prompt_tokens: 1000, completion_tokens: 0 } },
};

const goalOf = (request: ReceivedRequest) =>
  String(request.body.messages[1].content)
    .split("\n")[0]!
    .replace(/^Goal: /, "");

let requests: readonly ReceivedRequest[] = [];
const suite = useSuite({
  orchestrator: async () => {
    const chat = await startFakeChatServer((request) => BODIES[goalOf(request).split(" ")[0]!]);
    requests = chat.requests;
    suite.onCleanUp(() => chat.close());
    return {
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: MODEL,
      // 1 unit per 1M tokens is 1 micro a token: prices easy to check.
      MODEL_PRICES: JSON.stringify({ [MODEL]: { input: 1, output: 1 } }),
    };
  },
});

async function run(goal: string, budget: { maxRetries: number; maxTokens?: bigint }) {
  const { session } = await suite.orch.api.startSession({
    goal,
    task: {},
    scopes: ALL_SCOPES,
    policy: "openai",
    budget,
  });
  const done = await waitForSession(suite.orch.api, session!.sessionId, undefined, 60_000);
  return { done, asked: requests.filter((r) => goalOf(r) === goal).length };
}

describe("a 200 reply without choices[0].message", () => {
  it("is charged the prompt as the host counted it on every attempt, until the retry budget is spent", async () => {
    const { done, asked } = await run("empty question about refunds", { maxRetries: 3 });
    expect(asked).toBe(4);
    expect(done.stopReason).toBe("unrecoverable_error");
    expect(done.answer).toMatch(
      /^the policy failed: chat completions returned a body without choices\[0\]\.message; not retried: the session's retry budget \(3 of 3, model and tool calls together\) is spent/,
    );
    // The same prompt each time, counted by the host: some hundreds of tokens an attempt.
    const tokens = Number(done.usage!.tokens);
    expect(tokens % asked).toBe(0);
    expect(tokens / asked).toBeGreaterThan(100);
    expect(Number(done.usage!.costMicros)).toBe(tokens);
    expect(done.usage!.retries).toBe(3);
  });

  it("is charged the usage it reports on every attempt, until the token budget has no room for another", async () => {
    const { done, asked } = await run("reported question about refunds", { maxRetries: 40, maxTokens: 3500n });
    expect(asked).toBeGreaterThan(0);
    expect(asked).toBeLessThan(41);
    expect(Number(done.usage!.tokens)).toBe(1000 * asked);
    expect(done.stopReason).toBe("max_tokens");
    expect(done.answer).toMatch(/without calling the model: .* do not fit the session's token budget left/);
  });
});
