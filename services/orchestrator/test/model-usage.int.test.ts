// The tokens a model endpoint reports are what a session is charged, unless the report is under half
// the host's own count, or over twice its count of the prompt or past the reply's max tokens: a broken
// or hostile endpoint that reports a token per call would otherwise let a session spend past its token
// and money budgets uncounted, and one reporting 120,000 prompt tokens (or 1e300) would charge a session
// far past them for a prompt the host checked against them.
import { describe, expect, it } from "vitest";
import { chatCompletion, type ReceivedRequest, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, useSuite, waitForSession } from "./harness.js";

const MODEL = "gpt-4o-mini";

/** What the endpoint reports for a session, by its goal's first word. */
const REPORTS: Record<string, { prompt_tokens: number; completion_tokens: number } | null> = {
  honest: { prompt_tokens: 1000, completion_tokens: 40 },
  tiny: { prompt_tokens: 1, completion_tokens: 1 },
  inflated: { prompt_tokens: 120_000, completion_tokens: 10 },
  absurd: { prompt_tokens: 1e300, completion_tokens: 2 ** 64 },
  silent: null,
};

function reply(request: ReceivedRequest): unknown {
  const goal = String(request.body.messages[1].content).replace(/^Goal: /, "");
  return chatCompletion({
    content: "Refunds are paid back to the card within 5 days.",
    usage: REPORTS[goal.split(" ")[0]!]!,
  });
}

const suite = useSuite({
  orchestrator: async () => {
    const chat = await startFakeChatServer(reply);
    suite.onCleanUp(() => chat.close());
    return {
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: MODEL,
      // 1 unit per 1M tokens is 1 micro a token: prices easy to check.
      MODEL_PRICES: JSON.stringify({ [MODEL]: { input: 1, output: 1 } }),
    };
  },
});

async function usageOf(goal: string) {
  const { session } = await suite.orch.api.startSession({ goal, task: {}, scopes: ALL_SCOPES, policy: "openai" });
  const done = await waitForSession(suite.orch.api, session!.sessionId, undefined, 60_000);
  expect(done.stopReason).toBe("done");
  const trace = (await suite.orch.api.getTrace({ sessionId: done.sessionId })).records.map(
    (r) => JSON.parse(r) as { context?: { tokens: number } },
  );
  const counted = trace.find((r) => r.context)!.context!.tokens;
  return { tokens: Number(done.usage!.tokens), costMicros: Number(done.usage!.costMicros), counted };
}

async function disbelieved(model = MODEL): Promise<number> {
  const metrics = await (await fetch(`${suite.orch.httpUrl}/metrics`)).text();
  const line = metrics.match(
    new RegExp(`^loopguard_model_usage_disbelieved_total\\{[^}]*model="${model}"[^}]*\\} (\\d+)$`, "m"),
  );
  return Number(line?.[1] ?? 0);
}

describe("the tokens a model endpoint reports", () => {
  it("are charged as reported when they are near the host's count", async () => {
    const before = await disbelieved();
    const { tokens, costMicros, counted } = await usageOf("honest question about refunds");
    // 1,000 is within a tokenizer's difference of the host's count: from half of it to twice it.
    expect(counted).toBeLessThan(1000);
    expect(2 * counted).toBeGreaterThan(1000);
    expect(tokens).toBe(1040);
    expect(costMicros).toBe(1040);
    expect(await disbelieved()).toBe(before);
  });

  it("are not believed under half the host's count: the host's count is charged, counted and logged", async () => {
    const before = await disbelieved();
    const { tokens, costMicros, counted } = await usageOf("tiny question about refunds");
    // The prompt as counted before the call, and the reply's dozen tokens; not the 2 reported.
    expect(counted).toBeGreaterThan(50);
    expect(tokens).toBeGreaterThan(counted);
    expect(tokens).toBeLessThan(counted + 40);
    expect(costMicros).toBe(tokens);
    expect(await disbelieved()).toBe(before + 1);
    expect(suite.orch.logs.map((line) => JSON.parse(line))).toContainEqual(
      expect.objectContaining({
        msg: "a model endpoint reported 2 tokens where the host counted more: the host's count is charged",
        model: MODEL,
        count: tokens,
      }),
    );
  });

  it("are not believed past twice the host's count of the prompt: that is charged, counted and logged", async () => {
    const before = await disbelieved();
    const { tokens, costMicros, counted } = await usageOf("inflated question about refunds");
    // Not the 120,000 reported, nor the model's window (128,000): twice the prompt the host checked against the budget.
    expect(tokens).toBe(2 * counted + 10);
    expect(costMicros).toBe(tokens);
    expect(await disbelieved()).toBe(before + 1);
    expect(suite.orch.logs.map((line) => JSON.parse(line))).toContainEqual(
      expect.objectContaining({
        msg: "a model endpoint reported 120010 tokens more than the host believes (twice its count of the prompt, the reply's max tokens): that most is charged",
        model: MODEL,
        count: tokens,
      }),
    );
  });

  it("are not believed past twice the prompt in, the reply's max tokens out; the session stays readable", async () => {
    const before = await disbelieved();
    const { tokens, costMicros, counted } = await usageOf("absurd question about refunds");
    // Twice the prompt, and the reply's reserve (1,024) the host sent as max tokens.
    expect(tokens).toBe(2 * counted + 1024);
    expect(costMicros).toBe(tokens);
    expect(await disbelieved()).toBe(before + 1);
    expect((await suite.orch.api.listSessions({})).sessions.length).toBeGreaterThan(0);
    const metrics = await (await fetch(`${suite.orch.httpUrl}/metrics`)).text();
    expect(Number(metrics.match(/^loopguard_model_cost_micros_total\S* (\S+)$/m)?.[1])).toBeLessThan(1e7);
    expect(suite.orch.logs.map((line) => JSON.parse(line))).toContainEqual(
      expect.objectContaining({
        msg: `a model endpoint reported ${1e300 + 2 ** 64} tokens more than the host believes (twice its count of the prompt, the reply's max tokens): that most is charged`,
        count: tokens,
      }),
    );
  });

  it("that reports no usage at all is charged the host's count, and is not counted as under-reporting", async () => {
    const before = await disbelieved();
    const { tokens, counted } = await usageOf("silent question about refunds");
    expect(tokens).toBeGreaterThan(counted);
    expect(await disbelieved()).toBe(before);
  });

  it("of the built-in scripted policy are what it wrote: its sessions are never reported as under-reporting", async () => {
    const logged = suite.orch.logs.length;
    const { session } = await suite.orch.api.startSession({
      goal: "how do refunds work",
      task: { kind: "question", subgoals: ["which refunds need an approval", "how long do card refunds take"] },
      scopes: ALL_SCOPES,
      policy: "scripted",
    });
    const done = await waitForSession(suite.orch.api, session!.sessionId, undefined, 60_000);
    expect(done.stopReason).toBe("done");
    expect(await disbelieved("scripted")).toBe(0);
    const warned = suite.orch.logs.slice(logged).filter((line) => line.includes("where the host counted more"));
    expect(warned).toEqual([]);
  });
});
