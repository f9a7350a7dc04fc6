import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { errorOf } from "@loopguard/test-kit";
import { context, ROOT_CONTEXT, TraceFlags, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  createOpenAiPolicy,
  OPENAI_POLICY_SYSTEM_PROMPT,
  PolicyUnavailableError,
  type OpenAiPolicyOptions,
} from "../src/policies/openai-policy.js";
import type { Decision, PolicyInput, ResultEnvelope, ToolSpec } from "../src/policies/policy.js";
import {
  chatCompletion,
  type FakeChatServer,
  type ScriptedReply,
  type ScriptedToolCall,
  startFakeChatServer,
} from "./fake-chat-server.js";

const TOOLS: ToolSpec[] = [
  {
    name: "kb_search",
    description: "Search the knowledge base.",
    parameters: {
      type: "object",
      properties: { query: { type: "string", minLength: 1, maxLength: 512 } },
      required: ["query"],
      additionalProperties: false,
    },
  },
  {
    name: "billing_refund",
    description: "Refund part or all of an order.",
    parameters: {
      type: "object",
      properties: { order_id: { type: "string" }, amount_cents: { type: "integer" } },
      required: ["order_id", "amount_cents"],
    },
  },
];

function input(overrides: Partial<PolicyInput> = {}): PolicyInput {
  return {
    goal: "Refund order ord_AAAAAAAAAAAA if the policy allows it.",
    task: { order_id: "ord_AAAAAAAAAAAA", customer: "c_1" },
    tools: TOOLS,
    history: [],
    step: 1,
    ...overrides,
  };
}

function envelope(data: ResultEnvelope["data"], refs: string[] = []): ResultEnvelope {
  return { ok: true, data, refs, costMicros: 0, servedFrom: "live", observedAt: "2026-11-29T20:00:00.000Z" };
}

// As instrumentation.ts sets up in the service: the active span follows the async call.
const contextManager = new AsyncLocalStorageContextManager();
const spans = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(() => {
  context.disable();
});

let server: FakeChatServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function serve(script: ScriptedReply[], options: Partial<OpenAiPolicyOptions> = {}) {
  server = await startFakeChatServer(script);
  const policy = createOpenAiPolicy({ baseUrl: server.baseUrl, model: "gpt-test", ...options });
  return { server, policy };
}

function never(): AbortSignal {
  return new AbortController().signal;
}

/** What a final decision with this answer holds, with the confidence the model gave it and why it doubts it. */
function final(answer: string, confidence: number, uncertaintyReason: string) {
  return { kind: "final", answer, confidence, uncertaintyReason };
}

/** A policy asking a server whose one reply is these tool calls. */
function serveCalls(...calls: ScriptedToolCall[]) {
  return serve([() => chatCompletion({ toolCalls: calls })]);
}

function toolCalls(decision: Decision) {
  expect(decision.kind).toBe("tool_calls");
  return decision.kind === "tool_calls" ? decision.calls : [];
}

describe("openai policy: request", () => {
  it("posts model, system prompt, goal with task JSON and the tools as functions with tool_choice auto", async () => {
    const { server, policy } = await serveCalls({
      id: "call_abc",
      name: "kb_search",
      arguments: '{"query":"refund policy"}',
    });
    await policy.decide(input(), never());

    expect(server.requests).toHaveLength(1);
    const request = server.requests[0]!;
    expect(request.method).toBe("POST");
    expect(request.path).toBe("/v1/chat/completions");
    expect(request.headers["content-type"]).toBe("application/json");
    expect(request.body).toEqual({
      model: "gpt-test",
      messages: [
        { role: "system", content: OPENAI_POLICY_SYSTEM_PROMPT },
        {
          role: "user",
          content:
            'Goal: Refund order ord_AAAAAAAAAAAA if the policy allows it.\n\nTask (JSON):\n{"order_id":"ord_AAAAAAAAAAAA","customer":"c_1"}',
        },
      ],
      tools: TOOLS.map((tool) => ({
        type: "function",
        function: { name: tool.name, description: tool.description, parameters: tool.parameters },
      })),
      tool_choice: "auto",
      // The reply's reserve: without an input's own, the default.
      max_tokens: 1024,
    });
  });

  it("sends the host's reply reserve as max_tokens, and as max_completion_tokens to the o-series and gpt-5", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "ok" })]);
    await policy.decide(input({ maxOutputTokens: 333 }), never());
    expect(server.requests[0]!.body).toMatchObject({ max_tokens: 333 });
    await server.close();
    const reasoning = await serve([() => chatCompletion({ content: "ok" })], { model: "o4-mini" });
    await reasoning.policy.decide(input({ maxOutputTokens: 333 }), never());
    const body = reasoning.server.requests[0]!.body as Record<string, unknown>;
    expect(body.max_completion_tokens).toBe(333);
    expect(body).not.toHaveProperty("max_tokens");
  });

  it("sends the active span's context as a W3C traceparent: same trace, a new span for the model call", async () => {
    const reply = () =>
      chatCompletion({ content: "the refund policy allows it", usage: { prompt_tokens: 120, completion_tokens: 7 } });
    const { server, policy } = await serve([reply], { price: { input: 2, output: 10 } });
    const traceId = "0af7651916cd43dd8448eb211c80319c";
    const parent = trace.setSpanContext(ROOT_CONTEXT, {
      traceId,
      spanId: "b7ad6b7169203331",
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
    await context.with(parent, () => policy.decide(input(), never()));
    const header = String(server.requests[0]!.headers.traceparent);
    expect(header).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(header).not.toContain("b7ad6b7169203331");
    // The model call's span: that id, the session's span its parent, the model and tokens on it, no prompt text.
    const span = spans.getFinishedSpans().find((s) => s.spanContext().spanId === header.split("-")[2]);
    expect(span?.name).toBe("chat gpt-test");
    expect(span?.parentSpanContext?.spanId).toBe("b7ad6b7169203331");
    expect(span?.attributes).toMatchObject({
      "gen_ai.request.model": "gpt-test",
      "gen_ai.usage.input_tokens": 120,
      "gen_ai.usage.output_tokens": 7,
      "loopguard.cost_micros": 310,
    });
    expect(JSON.stringify(span?.attributes)).not.toContain("Refund order");
  });

  it("marks a tool whose breaker is open with when it is tried again, and shows a fallback's age and note to the model", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "ok" })]);
    const cached: ResultEnvelope = {
      ...envelope({ hits: [] }),
      servedFrom: "cache",
      ageMs: 840_000,
      note: "kb-search is unavailable now (UNAVAILABLE); this is its answer from 14 minutes ago",
    };
    await policy.decide(
      input({
        tools: [{ ...TOOLS[0]!, unavailableUntil: "2026-12-01T10:00:05.000Z" }, TOOLS[1]!],
        history: [
          { kind: "call", callId: "call_1", tool: "kb_search", arguments: '{"query":"cables"}' },
          { kind: "observation", callId: "call_1", tool: "kb_search", envelope: cached },
        ],
        step: 2,
      }),
      never(),
    );
    const body = server.requests[0]!.body as {
      tools: { function: { description: string } }[];
      messages: { role: string; content: string }[];
    };
    expect(body.tools[0]!.function.description).toBe(
      `${TOOLS[0]!.description} [Unavailable now: its circuit breaker is open; no call is sent before 2026-12-01T10:00:05.000Z.]`,
    );
    expect(body.tools[1]!.function.description).toBe(TOOLS[1]!.description);
    const result = JSON.parse(body.messages.find((m) => m.role === "tool")!.content) as ResultEnvelope;
    expect(result).toMatchObject({
      servedFrom: "cache",
      ageMs: 840_000,
      note: expect.stringContaining("14 minutes ago"),
    });
  });

  it("leaves tools and tool_choice out when the session has no tools", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "Nothing to do." })]);
    await policy.decide(input({ tools: [] }), never());
    expect(server.requests[0]!.body).not.toHaveProperty("tools");
    expect(server.requests[0]!.body).not.toHaveProperty("tool_choice");
  });

  it("accepts a base URL with a trailing slash", async () => {
    server = await startFakeChatServer([() => chatCompletion({ content: "ok" })]);
    const policy = createOpenAiPolicy({ baseUrl: `${server.baseUrl}/`, model: "gpt-test" });
    await policy.decide(input(), never());
    expect(server.requests[0]!.path).toBe("/v1/chat/completions");
  });
});

describe("openai policy: replies", () => {
  it("turns a single tool call into a tool_calls decision with the model's id and raw arguments", async () => {
    const { policy } = await serveCalls({ id: "call_abc", name: "kb_search", arguments: '{"query":"refund policy"}' });
    const decision = await policy.decide(input(), never());
    expect(toolCalls(decision)).toEqual([
      { id: "call_abc", name: "kb_search", arguments: '{"query":"refund policy"}' },
    ]);
  });

  it("keeps every tool call of one reply, in the model's order", async () => {
    const { policy } = await serveCalls(
      { id: "call_1", name: "kb_search", arguments: '{"query":"refund policy"}' },
      { id: "call_2", name: "billing_refund", arguments: '{"order_id":"ord_AAAAAAAAAAAA","amount_cents":500}' },
      { id: "call_3", name: "kb_search", arguments: '{"query":"risk policy"}' },
    );
    const calls = toolCalls(await policy.decide(input(), never()));
    expect(calls.map((call) => [call.id, call.name])).toEqual([
      ["call_1", "kb_search"],
      ["call_2", "billing_refund"],
      ["call_3", "kb_search"],
    ]);
  });

  it("passes arguments that are not valid JSON through as the raw string", async () => {
    const raw = '{"query": "refund policy",';
    const { policy } = await serveCalls({ id: "call_bad", name: "kb_search", arguments: raw });
    expect(toolCalls(await policy.decide(input(), never()))).toEqual([
      { id: "call_bad", name: "kb_search", arguments: raw },
    ]);
  });

  it("passes extra argument fields through unchanged", async () => {
    const raw = '{"query":"refund policy","limit":99,"hack":true}';
    const { policy } = await serveCalls({ id: "call_x", name: "kb_search", arguments: raw });
    expect(toolCalls(await policy.decide(input(), never()))[0]!.arguments).toBe(raw);
  });

  it("passes an unknown tool name through unchanged", async () => {
    const { policy } = await serveCalls({ id: "call_u", name: "delete_all_orders", arguments: "{}" });
    expect(toolCalls(await policy.decide(input(), never()))).toEqual([
      { id: "call_u", name: "delete_all_orders", arguments: "{}" },
    ]);
  });

  it("turns a plain text reply into a final decision with that text", async () => {
    const answer = "Refunded 5.00 EUR as rf_123 per kb:refund-policy@3.";
    const { policy } = await serve([() => chatCompletion({ content: answer })]);
    const decision = await policy.decide(input(), never());
    expect(decision.kind).toBe("final");
    expect(decision.kind === "final" && decision.answer).toBe(answer);
  });

  it("asks for the answer as a JSON object with confidence and uncertainty_reason, and reads a high and a low one", async () => {
    const { policy, server } = await serve([
      () =>
        chatCompletion({
          content: JSON.stringify({
            answer: "Refunds take 5 days [refund-policy@3].",
            confidence: 0.9,
            uncertainty_reason: "",
          }),
        }),
      () =>
        chatCompletion({
          content:
            '```json\n{"answer": "Maybe 5 days.", "confidence": 0.2, "uncertainty_reason": "no document says so"}\n```',
        }),
    ]);
    expect(server.requests.length).toBe(0);
    const high = await policy.decide(input(), never());
    expect(server.requests[0]!.body.messages[0].content).toContain('"confidence": <0 to 1');
    expect(high).toMatchObject(final("Refunds take 5 days [refund-policy@3].", 0.9, ""));
    expect(await policy.decide(input(), never())).toMatchObject(final("Maybe 5 days.", 0.2, "no document says so"));
  });

  it("takes an answer with a missing or invalid confidence as 0: model gave no confidence", async () => {
    const { policy } = await serve([
      () => chatCompletion({ content: "Refunds take 5 days." }),
      () => chatCompletion({ content: JSON.stringify({ answer: "Refunds take 5 days.", confidence: "quite" }) }),
    ]);
    for (let i = 0; i < 2; i += 1) {
      expect(await policy.decide(input(), never())).toMatchObject(
        final("Refunds take 5 days.", 0, "model gave no confidence"),
      );
    }
  });

  it("reads a confidence written beside tool calls, and states none when the model wrote none", async () => {
    const call = {
      id: "call_r",
      name: "billing_refund",
      arguments: '{"order_id":"ord_AAAAAAAAAAAA","amount_cents":500}',
    };
    const { policy } = await serve([
      () =>
        chatCompletion({
          content: '{"confidence": 0.4, "uncertainty_reason": "the order may be disputed"}',
          toolCalls: [call],
        }),
      () => chatCompletion({ toolCalls: [call] }),
    ]);
    expect(await policy.decide(input(), never())).toMatchObject({
      kind: "tool_calls",
      confidence: 0.4,
      uncertaintyReason: "the order may be disputed",
    });
    const silent = await policy.decide(input(), never());
    expect(silent.kind === "tool_calls" && [silent.confidence, silent.uncertaintyReason]).toEqual([
      undefined,
      undefined,
    ]);
  });

  it("gives tool calls without an id a stable one from the step and position", async () => {
    const { policy } = await serveCalls(
      { name: "kb_search", arguments: '{"query":"a"}' },
      { name: "kb_search", arguments: '{"query":"b"}' },
    );
    const calls = toolCalls(await policy.decide(input({ step: 4 }), never()));
    expect(calls.map((call) => call.id)).toEqual(["call_4_0", "call_4_1"]);
  });

  it("replaces a tool call id the session already used, so ids stay unique", async () => {
    const { policy } = await serveCalls(
      { id: "call_0", name: "kb_search", arguments: '{"query":"b"}' },
      { id: "call_0", name: "kb_search", arguments: '{"query":"c"}' },
    );
    const history: PolicyInput["history"] = [
      { kind: "call", callId: "call_0", tool: "kb_search", arguments: '{"query":"a"}' },
      { kind: "observation", callId: "call_0", tool: "kb_search", envelope: envelope({ hits: [] }) },
    ];
    const calls = toolCalls(await policy.decide(input({ step: 2, history }), never()));
    expect(calls.map((call) => call.id)).toEqual(["call_2_0", "call_2_1"]);
  });

  it("maps usage.prompt_tokens and completion_tokens to token usage", async () => {
    const { policy } = await serve([
      () => chatCompletion({ content: "done", usage: { prompt_tokens: 1234, completion_tokens: 56 } }),
    ]);
    expect((await policy.decide(input(), never())).usage).toEqual({ input: 1234, output: 56 });
  });

  it("counts zero tokens when the server sends no usage", async () => {
    const { policy } = await serve([() => chatCompletion({ content: "done", usage: null })]);
    expect((await policy.decide(input(), never())).usage).toEqual({ input: 0, output: 0 });
  });

  it("hashes the prompt: the same input gives the same hash, another input another hash", async () => {
    const reply = () => chatCompletion({ content: "done" });
    const { policy } = await serve([reply, reply, reply, reply]);
    const first = await policy.decide(input(), never());
    const again = await policy.decide(input(), never());
    const otherGoal = await policy.decide(input({ goal: "Answer a question." }), never());
    const otherTools = await policy.decide(input({ tools: TOOLS.slice(0, 1) }), never());
    expect(first.promptHash).toMatch(/^[0-9a-f]{64}$/);
    expect(again.promptHash).toBe(first.promptHash);
    expect(otherGoal.promptHash).not.toBe(first.promptHash);
    expect(otherTools.promptHash).not.toBe(first.promptHash);
  });
});

describe("openai policy: history", () => {
  it("sends calls as assistant tool_calls, results as tool messages with matching ids, and a rejected answer with the reason", async () => {
    const { server, policy } = await serve([
      () => chatCompletion({ content: "Refunded as rf_9 (kb:refund-policy@3)." }),
    ]);
    const kb = envelope({ hits: [{ id: "refund-policy", version: 3 }] }, ["kb:refund-policy@3"]);
    const order = envelope({ order_id: "ord_AAAAAAAAAAAA", refundable_cents: 500 }, ["order:ord_AAAAAAAAAAAA@2"]);
    const refund = envelope({ refund_id: "rf_9" });
    await policy.decide(
      input({
        step: 4,
        history: [
          { kind: "call", callId: "call_a", tool: "kb_search", arguments: '{"query":"refund policy"}' },
          { kind: "call", callId: "call_b", tool: "billing_get_order", arguments: '{"order_id":"ord_AAAAAAAAAAAA"}' },
          { kind: "observation", callId: "call_a", tool: "kb_search", envelope: kb },
          { kind: "observation", callId: "call_b", tool: "billing_get_order", envelope: order },
          { kind: "rejected_answer", text: "The order was refunded.", why: "the answer cites no refund id" },
          { kind: "call", callId: "call_2_0", tool: "billing_refund", arguments: "{not json" },
          { kind: "observation", callId: "call_2_0", tool: "billing_refund", envelope: refund },
        ],
      }),
      never(),
    );

    expect(server.requests[0]!.body.messages.slice(2)).toEqual([
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "kb_search", arguments: '{"query":"refund policy"}' } },
          {
            id: "call_b",
            type: "function",
            function: { name: "billing_get_order", arguments: '{"order_id":"ord_AAAAAAAAAAAA"}' },
          },
        ],
      },
      { role: "tool", tool_call_id: "call_a", content: JSON.stringify(kb) },
      { role: "tool", tool_call_id: "call_b", content: JSON.stringify(order) },
      { role: "assistant", content: "The order was refunded." },
      {
        role: "user",
        content:
          "That answer was not accepted: the answer cites no refund id\nContinue: call tools if you need more facts or actions, then answer again.",
      },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          { id: "call_2_0", type: "function", function: { name: "billing_refund", arguments: "{not json" } },
        ],
      },
      { role: "tool", tool_call_id: "call_2_0", content: JSON.stringify(refund) },
    ]);
  });

  it("keeps calls executed one by one as separate turns, each answered before the next", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "done" })]);
    const a = envelope({ hits: [] });
    const b = envelope({ hits: [] });
    await policy.decide(
      input({
        history: [
          { kind: "call", callId: "c1", tool: "kb_search", arguments: '{"query":"a"}' },
          { kind: "observation", callId: "c1", tool: "kb_search", envelope: a },
          { kind: "call", callId: "c2", tool: "kb_search", arguments: '{"query":"b"}' },
          { kind: "observation", callId: "c2", tool: "kb_search", envelope: b },
        ],
      }),
      never(),
    );
    const roles = server.requests[0]!.body.messages.slice(2).map((m: { role: string }) => m.role);
    expect(roles).toEqual(["assistant", "tool", "assistant", "tool"]);
  });

  it("answers a call that has no recorded result, so the endpoint does not reject the conversation", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "done" })]);
    await policy.decide(
      input({
        history: [
          { kind: "call", callId: "c1", tool: "kb_search", arguments: '{"query":"a"}' },
          { kind: "call", callId: "c2", tool: "billing_refund", arguments: "{}" },
          { kind: "observation", callId: "c1", tool: "kb_search", envelope: envelope({ hits: [] }) },
          { kind: "rejected_answer", text: "done", why: "no refund was made" },
        ],
      }),
      never(),
    );
    const messages = server.requests[0]!.body.messages.slice(2);
    expect(messages.map((m: { role: string; tool_call_id?: string }) => m.tool_call_id ?? m.role)).toEqual([
      "assistant",
      "c1",
      "c2",
      "assistant",
      "user",
    ]);
    expect(JSON.parse(messages[2].content)).toMatchObject({ ok: false });
  });
});

describe("openai policy: auth", () => {
  const KEY = "sk-test-4f9c2b7e1d0a9f8e7d6c5b4a";

  it("sends a bearer token when a key is set", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "ok" })], { apiKey: KEY });
    await policy.decide(input(), never());
    expect(server.requests[0]!.headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it("sends no authorization header without a key", async () => {
    const { server, policy } = await serve([() => chatCompletion({ content: "ok" })]);
    await policy.decide(input(), never());
    expect(server.requests[0]!.headers).not.toHaveProperty("authorization");
  });

  it("never puts the key in an error, even when the server echoes it", async () => {
    const { policy } = await serve(
      [
        (request) => ({
          status: 401,
          body: {
            error: {
              message: `Incorrect API key provided: ${String(request.headers.authorization).slice("Bearer ".length)}`,
              type: "invalid_request_error",
              code: "invalid_api_key",
            },
          },
        }),
      ],
      { apiKey: KEY },
    );
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    const error = err as PolicyUnavailableError;
    expect(error.message).toContain("HTTP 401");
    expect(error.message).toContain("Incorrect API key provided");
    expect(error.retryable).toBe(false);
    expect(`${error.message} ${error.stack} ${JSON.stringify(error)} ${String(error.cause)}`).not.toContain(KEY);
  });
});

describe("openai policy: endpoint failures", () => {
  it("throws a retryable PolicyUnavailableError on 500", async () => {
    const { policy } = await serve([
      () => ({ status: 500, body: { error: { message: "The server had an error", type: "server_error" } } }),
    ]);
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: true, status: 500, retryAfterMs: undefined });
  });

  it("throws a non-retryable PolicyUnavailableError on 400", async () => {
    const { policy } = await serve([
      () => ({
        status: 400,
        body: { error: { message: "Invalid schema for function 'kb_search'", type: "invalid_request_error" } },
      }),
    ]);
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: false, status: 400 });
    expect((err as Error).message).toContain("Invalid schema for function 'kb_search'");
  });

  it("obeys retry-after on 429", async () => {
    const { policy } = await serve([
      () => ({
        status: 429,
        headers: { "retry-after": "2" },
        body: { error: { message: "Rate limit reached", type: "requests" } },
      }),
    ]);
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: true, status: 429, retryAfterMs: 2000 });
  });

  it("throws a retryable PolicyUnavailableError when the body is not JSON", async () => {
    const { policy } = await serve([() => ({ status: 200, body: "<html>Bad gateway</html>" })]);
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: true });
  });

  it("throws a retryable PolicyUnavailableError when the JSON is not a chat completion", async () => {
    const { policy } = await serve([() => ({ status: 200, body: { object: "list", data: [] } })]);
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: true });
  });

  it("times out a hanging server within the configured timeout", async () => {
    const { server, policy } = await serve([() => new Promise(() => {})], { timeoutMs: 300 });
    const started = Date.now();
    const err = await errorOf(policy.decide(input(), never()));
    const elapsed = Date.now() - started;
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: true });
    expect((err as Error).message).toContain("timed out after 300 ms");
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(1500);
    expect(server.requests).toHaveLength(1);
  });

  it("times out a server that sends its headers and then drips its body, within the configured timeout", async () => {
    const drips: NodeJS.Timeout[] = [];
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" });
        res.write("{");
        drips.push(setInterval(() => res.write(" "), 50));
      });
    });
    await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
    try {
      const { port } = server.address() as AddressInfo;
      const policy = createOpenAiPolicy({ baseUrl: `http://127.0.0.1:${port}/v1`, model: "gpt-test", timeoutMs: 300 });
      const started = Date.now();
      const err = await errorOf(policy.decide(input(), never()));
      expect(err).toBeInstanceOf(PolicyUnavailableError);
      expect(err).toMatchObject({ retryable: true, promptRead: true });
      expect((err as Error).message).toContain("timed out after 300 ms");
      expect(Date.now() - started).toBeLessThan(1500);
    } finally {
      for (const drip of drips) clearInterval(drip);
      server.closeAllConnections();
      server.close();
    }
  });

  it("cuts the call short at the session's wall clock left when that is below the configured cap", async () => {
    const { policy } = await serve([() => new Promise(() => {})], { timeoutMs: 10_000 });
    const started = Date.now();
    const err = await errorOf(policy.decide(input({ timeoutMs: 300 }), never()));
    expect(Date.now() - started).toBeLessThan(1500);
    expect((err as Error).message).toContain("timed out after 300 ms");
  });

  it("stops when the caller aborts, with the caller's abort reason rather than an outage", async () => {
    const { policy } = await serve([() => new Promise(() => {})], { timeoutMs: 10_000 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const started = Date.now();
    const err = await errorOf(policy.decide(input(), controller.signal));
    expect(Date.now() - started).toBeLessThan(1500);
    expect(err).not.toBeInstanceOf(PolicyUnavailableError);
    expect((err as Error).name).toBe("AbortError");
  });

  it("throws a retryable PolicyUnavailableError when nothing listens", async () => {
    const closed = await startFakeChatServer([]);
    await closed.close();
    const policy = createOpenAiPolicy({ baseUrl: closed.baseUrl, model: "gpt-test", timeoutMs: 2000 });
    const err = await errorOf(policy.decide(input(), never()));
    expect(err).toBeInstanceOf(PolicyUnavailableError);
    expect(err).toMatchObject({ retryable: true, status: undefined });
    expect((err as Error).message).toContain("ECONNREFUSED");
  });
});
