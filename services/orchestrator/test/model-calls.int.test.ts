// Model calls as the host governs them, against a local server speaking the chat-completions wire
// format: a long session kept inside the model's window by summaries that keep refs and hashes,
// the reply's reserve checked before a call and sent as max_tokens, the 80% alarm on the session,
// its trace and /metrics, the price of calls against the money budget, one retry budget, and the
// session's wall clock as the call's deadline.
import type { JsonObject } from "@bufbuild/protobuf";
import { KbSearchService } from "@loopguard/proto/gen/loopguard/kb/v1/kb_pb";
import { status, ToolError } from "@loopguard/tool-sdk";
import { startTestTool } from "@loopguard/tool-sdk/testing";
import { describe, expect, it } from "vitest";
import { chatCompletion, type FakeChatServer, type ReceivedRequest, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, startOrchestrator, type TestOrchestrator, useSuite, waitForSession } from "./harness.js";

const WINDOW = 12_000;
const RESERVE = 256;
/** Steps of the long session: 39 searches, then the answer. */
const LONG_STEPS = 40;

/** Words, so that the tokenizer sees text rather than one repeated character. */
function words(n: number): string {
  return Array.from({ length: n }, (_, i) => `term${(i * 7919) % 1000}`).join(" ");
}

function goalOf(request: ReceivedRequest): string {
  return String(request.body.messages[1].content)
    .split("\n")[0]!
    .replace(/^Goal: /, "");
}

/** The model: what it answers depends on the session's goal. */
function model(request: ReceivedRequest): unknown {
  const goal = goalOf(request);
  const results = (request.body.messages as { role: string }[]).filter((m) => m.role === "tool").length;
  if (goal.startsWith("long")) {
    if (results < LONG_STEPS - 1)
      return chatCompletion({
        toolCalls: [
          {
            id: `s${results}`,
            name: "kb_search_search",
            arguments: JSON.stringify({ query: `refund rules part ${results}`, limit: 3 }),
          },
        ],
        usage: null,
      });
    return chatCompletion({ content: "Done: the refund rules were read.", usage: null });
  }
  if (goal.startsWith("tool retry")) {
    if (results === 0)
      return chatCompletion({
        toolCalls: [{ id: "k1", name: "kb_search_search", arguments: '{"query":"refund policy","limit":1}' }],
      });
    return chatCompletion({ content: "Read it." });
  }
  if (goal.startsWith("flaky")) return { status: 503, body: { error: { message: "overloaded" } } };
  if (goal.startsWith("hang")) return new Promise(() => {});
  return chatCompletion({ content: "ok" });
}

let chat: FakeChatServer;
const suite = useSuite({
  tools: { inTurn: true },
  orchestrator: async () => {
    chat = await startFakeChatServer(model);
    suite.onCleanUp(() => chat.close());
    return {
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: "gpt-4o-mini",
      CONTEXT_COMPRESS_TOKENS: "1500",
      MODEL_CONTEXT_WINDOW_TOKENS: String(WINDOW),
      MODEL_MAX_OUTPUT_TOKENS: String(RESERVE),
      // 1 unit per 1M tokens is 1 micro a token: prices easy to check.
      MODEL_PRICES: JSON.stringify({ "gpt-4o-mini": { input: 1, output: 2 } }),
    };
  },
});

async function run(goal: string, budget: Record<string, number | bigint> = {}, task: JsonObject = {}) {
  const { session } = await suite.orch.api.startSession({ goal, task, scopes: ALL_SCOPES, policy: "openai", budget });
  const id = session!.sessionId;
  const done = await waitForSession(suite.orch.api, id, undefined, 60_000);
  const requests = chat.requests.filter((r) => goalOf(r) === goal);
  const trace = (await suite.orch.api.getTrace({ sessionId: id })).records.map(
    (r) => JSON.parse(r) as Record<string, any>,
  );
  return { done, requests, trace };
}

describe("model calls", () => {
  it(`keeps a ${LONG_STEPS}-step session inside the window: old results become summaries with refs and a hash, the task stays exact`, async () => {
    const task = { kind: "question", order_id: "ord_DEMO00000001", note: "keep me" };
    const { done, requests, trace } = await run(
      "long: read every refund rule",
      { maxSteps: 50, maxToolCalls: 50, maxCostMicros: 10_000_000n },
      task,
    );
    expect(done.stopReason).toBe("done");
    expect(done.usage?.steps).toBe(LONG_STEPS);
    expect(requests).toHaveLength(LONG_STEPS);

    // What the model saw last: the task exactly as given, old results summarised, the latest whole.
    const last = requests.at(-1)!.body;
    expect(last.messages[1].content).toBe(
      `Goal: long: read every refund rule\n\nTask (JSON):\n${JSON.stringify(task)}`,
    );
    const results = (last.messages as { role: string; content: string }[])
      .filter((m) => m.role === "tool")
      .map((m) => JSON.parse(m.content));
    expect(results).toHaveLength(LONG_STEPS - 1);
    const summaries = results.filter((r) => r.data?.compressed === true);
    expect(summaries.length).toBeGreaterThanOrEqual(LONG_STEPS - 5);
    for (const summary of summaries) {
      expect(summary.data.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(summary).toMatchObject({ ok: true, servedFrom: "live" });
      expect(summary.refs.length).toBeGreaterThan(0);
      expect(summary.observedAt).toMatch(/^\d{4}-/);
    }
    expect(results.at(-1).data.hits.length).toBeGreaterThan(0);

    // Every prompt, counted before it was sent, left room for the reply; every call carried the reserve.
    const prompts = trace
      .filter((r) => r.context)
      .map((r) => r.context as { tokens: number; tokens_before: number; alarm: boolean });
    expect(prompts).toHaveLength(LONG_STEPS);
    for (const p of prompts) expect(p.tokens + RESERVE).toBeLessThanOrEqual(WINDOW);
    expect(prompts.some((p) => p.tokens < p.tokens_before)).toBe(true);
    for (const r of requests) expect(r.body.max_tokens).toBe(RESERVE);

    // On the session: the last prompt, the window, what compression saved.
    const context = done.context!;
    expect(Number(context.windowTokens)).toBe(WINDOW);
    expect(Number(context.promptTokens)).toBe(prompts.at(-1)!.tokens);
    expect(Number(context.savedTokens)).toBeGreaterThan(Number(context.promptTokens));
    expect(context.compressions).toBeGreaterThanOrEqual(summaries.length);
    expect(context.alarms).toBe(0);
    // Without summaries the last prompt would not have fit the window at all.
    expect(Number(context.promptTokens) + Number(context.savedTokens)).toBeGreaterThan(WINDOW);
    const metrics = await (await fetch(`${suite.orch.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^loopguard_session_context_compression_ratio_count({[^}]*})? [1-9]/m);
    expect(metrics).toMatch(/^loopguard_model_cost_micros_total({[^}]*})? [1-9]/m);

    // The endpoint reported no usage: the tokenizer's counts are the session's tokens, priced from the table.
    const promptTokens = prompts.reduce((n, p) => n + p.tokens, 0);
    expect(Number(done.usage!.tokens)).toBeGreaterThan(promptTokens);
    expect(Number(done.usage!.costMicros)).toBeGreaterThanOrEqual(promptTokens);

    // Every model call went out in the session's trace.
    for (const r of requests)
      expect(String(r.headers.traceparent)).toMatch(new RegExp(`^00-${done.traceId}-[0-9a-f]{16}-01$`));
  }, 120_000);

  it("raises the 80% alarm on the session, in its trace and in /metrics", async () => {
    // A model with a small window: the task alone (never compressed) takes it past 80%.
    const small = await startOrchestrator(suite.tools, {
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: "gpt-4o-mini",
      MODEL_CONTEXT_WINDOW_TOKENS: "1000",
      MODEL_MAX_OUTPUT_TOKENS: "16",
    });
    try {
      const goal = "alarm: answer a long task";
      const { session } = await small.api.startSession({
        goal,
        task: { kind: "question", text: words(150) },
        scopes: ALL_SCOPES,
        policy: "openai",
      });
      const done = await waitForSession(small.api, session!.sessionId);
      expect(done.stopReason).toBe("done");
      expect(chat.requests.filter((r) => goalOf(r) === goal)).toHaveLength(1);
      expect(done.context?.alarms).toBe(1);
      const trace = (await small.api.getTrace({ sessionId: session!.sessionId })).records.map(
        (r) => JSON.parse(r) as Record<string, any>,
      );
      expect(trace.find((r) => r.context)?.context).toMatchObject({ alarm: true, window: 1000 });
      const metrics = await (await fetch(`${small.httpUrl}/metrics`)).text();
      expect(metrics).toMatch(/^loopguard_session_context_alarms_total({[^}]*})? 1$/m);
      expect(small.logs.some((line) => line.includes("session context at 80% of the model window"))).toBe(true);
    } finally {
      await small.close();
    }
  }, 60_000);

  it("stops with max_tokens, without calling the model, when the prompt and the reply's reserve exceed the tokens left", async () => {
    const { done, requests } = await run("small: any question", { maxTokens: 400n });
    expect(done.stopReason).toBe("max_tokens");
    expect(done.answer).toMatch(
      /without calling the model: the prompt \(\d+ tokens after compressing old results\) and the reply's reserve \(256 tokens\) do not fit the session's token budget left \(400 tokens\)/,
    );
    expect(requests).toHaveLength(0);
  });

  it("stops with max_cost, without calling the model, when the call's price with the reserve exceeds the money left", async () => {
    const { done, requests } = await run("cheap: any question", { maxCostMicros: 300n });
    expect(done.stopReason).toBe("max_cost");
    expect(done.answer).toMatch(/may cost up to \d+ micros .* and 300 are left/);
    expect(requests).toHaveLength(0);
  });

  it("retries a failing model while the retry budget lasts, then stops saying it is spent", async () => {
    const { done, requests } = await run("flaky: any question", { maxRetries: 2 });
    expect(requests).toHaveLength(3);
    expect(done.stopReason).toBe("unrecoverable_error");
    expect(done.answer).toMatch(/HTTP 503.*retry budget \(2 of 2, model and tool calls together\) is spent/);
    expect(done.usage?.retries).toBe(2);
    expect(done.budget?.maxRetries).toBe(2);
  });

  /** A knowledge base unavailable for its first `failures` searches, then answering, under an orchestrator of its own. */
  async function withFlakyKb(
    failures: number,
    check: (api: TestOrchestrator["api"], calls: () => number) => Promise<void>,
  ): Promise<void> {
    let calls = 0;
    const kb = await startTestTool({
      service: KbSearchService,
      handlers: {
        search: async () => {
          calls += 1;
          if (calls <= failures) throw new ToolError(status.UNAVAILABLE, "INDEX_UNAVAILABLE", "index reloading");
          return { hits: [{ docId: "refund-policy", version: 3, title: "Refund policy" }] };
        },
      },
    });
    const flakyKb = await startOrchestrator(suite.tools, {
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: "gpt-4o-mini",
      KB_SEARCH_ADDR: kb.address,
    });
    try {
      await check(flakyKb.api, () => calls);
    } finally {
      await flakyKb.close();
      await kb.close();
    }
  }

  it("counts a tool call's attempts beyond the first against the retry budget", async () => {
    // Unavailable once, then answers: the tool client retries it.
    await withFlakyKb(1, async (api, calls) => {
      const { session } = await api.startSession({
        goal: "tool retry: read the refund policy",
        scopes: ALL_SCOPES,
        policy: "openai",
      });
      const done = await waitForSession(api, session!.sessionId);
      expect(done.stopReason).toBe("done");
      expect(calls()).toBe(2);
      expect(done.usage?.retries).toBe(1);
    });
  }, 60_000);

  it("lets a read retry only as far as the session's retry budget reaches", async () => {
    // Unavailable twice, then answers: the client alone would retry twice within the one call.
    await withFlakyKb(2, async (api) => {
      const { session } = await api.startSession({
        goal: "tool retry: read the refund policy",
        scopes: ALL_SCOPES,
        policy: "openai",
        budget: { maxRetries: 1 },
      });
      const done = await waitForSession(api, session!.sessionId);
      expect(done.budget?.maxRetries).toBe(1);
      expect(done.usage?.retries).toBe(1);
      const steps = (await api.getTrace({ sessionId: session!.sessionId })).records.map(
        (r) => JSON.parse(r) as { attempt?: number },
      );
      expect(Math.max(...steps.map((step) => step.attempt ?? 1))).toBeLessThanOrEqual(2);
    });
  }, 60_000);

  it("gives a model call no more than the session's wall clock left", async () => {
    const started = Date.now();
    const { done, requests } = await run("hang: any question", { maxWallClockMs: 1500 });
    expect(requests).toHaveLength(1);
    expect(done.stopReason).toBe("unrecoverable_error");
    const [, ms] = /timed out after (\d+) ms/.exec(done.answer) ?? [];
    expect(Number(ms)).toBeLessThanOrEqual(1500);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("charges a model call that timed out its prompt, as the model read it, though no decision came", async () => {
    const { done, requests } = await run("hang: what does it cost", { maxWallClockMs: 1500 });
    expect(requests).toHaveLength(1);
    expect(done.answer).toMatch(/timed out/);
    // The prompt's tokens (its instructions and tools alone are over a hundred), at 1 micro an input
    // token (MODEL_PRICES above), and nothing for a reply that never came.
    const tokens = Number(done.usage?.tokens);
    expect(tokens).toBeGreaterThan(100);
    expect(Number(done.usage?.costMicros)).toBe(tokens);
  });
});
