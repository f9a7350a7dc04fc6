// Bounds on everything a model writes, with a real orchestrator in-process and the real tool
// processes: megabytes of answer or arguments are cut before anything redacts them (redaction costs
// ~1 s of CPU per MB of digits), tool-call ids that are too long or personal data never reach a
// span (the SDK's in-memory exporter records every span), and a model reply larger than the host
// reads ends the session with a clear error.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { redactText } from "@loopguard/tool-sdk";
import { trace } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { describe, expect, it } from "vitest";
import type { Decision, Policy, PolicyInput } from "../src/policies/policy.js";
import { MAX_ANSWER_CHARS, MAX_CALLS_PER_DECISION } from "../src/session/model-bounds.js";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, modelSession, startOrchestrator, useSuite, waitForSession } from "./harness.js";

const spans = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));

const suite = useSuite({ orchestrator: false });

/** About 5 MB of text dense with mobile numbers: what costs the redactor most. */
const FIVE_MB = "call 13800138000 ".repeat(300_000);

/** A model of the test's own in place of the openai policy: each step's decision from `steps`, every input it was given kept. */
function scriptedModel(
  steps: ((input: PolicyInput) => Omit<Decision, "usage" | "promptHash">)[],
): Policy & { readonly inputs: PolicyInput[] } {
  const inputs: PolicyInput[] = [];
  return {
    name: "openai",
    inputs,
    async decide(input) {
      inputs.push(input);
      return { ...steps[input.step - 1]!(input), usage: { input: 1, output: 1 }, promptHash: "" } as Decision;
    },
  };
}

async function runWith(model: Policy) {
  const orch = await startOrchestrator(suite.tools, {}, { policies: [model] });
  try {
    const cpu = process.cpuUsage();
    const { session } = await orch.api.startSession({
      goal: "Summarise the refund policy",
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const done = await waitForSession(orch.api, session!.sessionId);
    const used = process.cpuUsage(cpu);
    const trace = (await orch.api.getTrace({ sessionId: done.sessionId })).records;
    return { done, cpuMs: (used.user + used.system) / 1000, trace };
  } finally {
    await orch.close();
  }
}

describe("what the model writes is bounded", () => {
  it("cuts a 5 MB answer and refuses 5 MB arguments before any redaction: the session costs well under a second of CPU", async () => {
    const big = JSON.stringify({ query: FIVE_MB, limit: 1 });
    const model = scriptedModel([
      () => ({ kind: "tool_calls", calls: [{ id: "big", name: "kb_search_search", arguments: big }] }),
      () => ({ kind: "final", answer: FIVE_MB }),
    ]);
    const { done, cpuMs, trace } = await runWith(model);
    expect(done.stopReason).toBe("done");
    // Redacting the 5 MB would cost seconds (6.6 s of CPU here); the whole session costs 0.43–0.56 s
    // on a 2-core machine, more with its neighbours' load: a second is the bound.
    expect(cpuMs).toBeLessThan(1000);
    // Cut, but paid for: both 5 MB replies, reported as 1 token each, are charged the reply's max tokens
    // sent (1,024), past which the host believes no model writes.
    expect(Number(done.usage!.tokens)).toBeGreaterThan(2 * 1024);
    expect(Number(done.usage!.tokens)).toBeLessThan(2 * 1024 + 2000);
    expect(done.answer.length).toBeLessThan(MAX_ANSWER_CHARS + 100);
    expect(done.answer).toMatch(/^call \[redacted\] call .*\[the host cut \d+ more characters\]$/s);
    expect(redactText(done.answer)).toBe(done.answer);
    const [call, observation] = model.inputs[1]!.history;
    expect(call).toMatchObject({ kind: "call", callId: "big", tool: "kb_search_search" });
    expect(call?.kind === "call" && call.arguments.length).toBeLessThanOrEqual(200);
    expect(observation).toMatchObject({ kind: "observation", envelope: { ok: false, error: { code: "EINVAL" } } });
    const message = observation?.kind === "observation" ? (observation.envelope.error?.message ?? "") : "";
    expect(
      message.startsWith(
        `arguments for kb_search_search are ${big.length} bytes; it accepts at most 16384. They began: {"query":"call [redacted] call`,
      ),
    ).toBe(true);
    expect(message.length).toBeLessThan(400);
    expect(trace.join("").length).toBeLessThan(64 * 1024);
  });

  it("keeps a 10 kB tool-call id and one that is a phone number out of every span, calling under ids the host made", async () => {
    spans.reset();
    const huge = "x".repeat(10_000);
    const model = scriptedModel([
      () => ({
        kind: "tool_calls",
        calls: [
          { id: huge, name: "kb_search_search", arguments: '{"query":"refund policy","limit":1}' },
          { id: "13800138000", name: "kb_search_search", arguments: '{"query":"card refunds","limit":1}' },
        ],
      }),
      () => ({ kind: "final", answer: "Read the refund policy." }),
    ]);
    const { done } = await runWith(model);
    expect(done.stopReason).toBe("done");
    const finished = spans.getFinishedSpans();
    const toolSpans = finished.filter((s) => s.name === "execute_tool kb_search_search");
    expect(toolSpans.map((s) => s.attributes["gen_ai.tool.call.id"])).toEqual(["call_1_0", "call_1_1"]);
    for (const span of finished) {
      for (const value of Object.values(span.attributes)) {
        expect(String(value)).not.toContain("xxxxxxxxxx");
        expect(String(value)).not.toContain("13800138000");
      }
    }
    expect(model.inputs[1]!.history.map((item) => item.kind !== "rejected_answer" && item.callId)).toEqual([
      "call_1_0",
      "call_1_0",
      "call_1_1",
      "call_1_1",
    ]);
  });

  it(`takes at most ${MAX_CALLS_PER_DECISION} tool calls from one reply of thousands, and says how many it dropped`, async () => {
    const flood = Array.from({ length: 3000 }, (_, i) => ({ id: `c${i}`, name: "nope", arguments: "{" }));
    const model = scriptedModel([
      () => ({ kind: "tool_calls", calls: flood }),
      () => ({ kind: "final", answer: "Nothing to report." }),
    ]);
    const { done, cpuMs, trace } = await runWith(model);
    expect(done.stopReason).toBe("done");
    const history = model.inputs[1]!.history;
    expect(history.filter((h) => h.kind === "call")).toHaveLength(MAX_CALLS_PER_DECISION);
    expect(history.filter((h) => h.kind === "observation")).toHaveLength(MAX_CALLS_PER_DECISION);
    const decision = trace.map((r) => JSON.parse(r) as { decision: { kind: string; dropped?: number } })[0]!.decision;
    expect(decision).toMatchObject({ kind: "tool_calls", dropped: 3000 - MAX_CALLS_PER_DECISION });
    expect(cpuMs).toBeLessThan(2000);
  });

  it("stops at the wall clock between the calls of one reply, refused calls included", async () => {
    const model: Policy = {
      name: "openai",
      async decide() {
        await new Promise((resolve) => setTimeout(resolve, 600));
        const calls = Array.from({ length: 5 }, (_, i) => ({ id: `late${i}`, name: "nope", arguments: "{}" }));
        return { kind: "tool_calls", calls, usage: { input: 1, output: 1 }, promptHash: "" };
      },
    };
    const orch = await startOrchestrator(suite.tools, {}, { policies: [model] });
    try {
      const { session } = await orch.api.startSession({
        goal: "Summarise the refund policy",
        scopes: ["kb:read"],
        policy: "openai",
        budget: { maxWallClockMs: 400 },
      });
      const done = await waitForSession(orch.api, session!.sessionId);
      expect(done.stopReason).toBe("deadline");
      expect(done.answer).toBe("deadline reached with 5 call(s) the policy asked for not made");
    } finally {
      await orch.close();
    }
  });

  it("ends a session its run failed on unexpectedly (a policy's malformed decision) FAILED, saying so, while it holds the lease", async () => {
    const broken: Policy = {
      name: "openai",
      async decide() {
        return { kind: "tool_calls", usage: { input: 1, output: 1 }, promptHash: "" } as unknown as Decision;
      },
    };
    const orch = await startOrchestrator(suite.tools, {}, { policies: [broken] });
    try {
      const done = await modelSession(orch, "Summarise the refund policy");
      expect([SessionState[done.state], done.stopReason]).toEqual(["FAILED", "unrecoverable_error"]);
      expect(done.answer).toMatch(/^the orchestrator failed: /);
    } finally {
      await orch.close();
    }
  });

  it("does not read a model reply larger than the host reads: the session fails with a clear reason", async () => {
    const chat = await startFakeChatServer([() => chatCompletion({ content: FIVE_MB })]);
    const orch = await startOrchestrator(suite.tools, { OPENAI_BASE_URL: chat.baseUrl });
    try {
      const done = await modelSession(orch, "Summarise the refund policy");
      expect(SessionState[done.state]).toBe("FAILED");
      expect(done.stopReason).toBe("unrecoverable_error");
      expect(done.answer).toBe(
        "the policy failed: chat completions returned a body of more than 262144 bytes, the most the host reads; the model's reply was not used",
      );
    } finally {
      await orch.close();
      await chat.close();
    }
  });
});
