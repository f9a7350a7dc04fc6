// Sessions driven by the openai policy against a local server speaking the chat-completions
// wire format: malformed output becomes observations the next step corrects.
import { refusal } from "@loopguard/test-kit";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, status } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import { chatCompletion, type ScriptedReply, startFakeChatServer, toolCall, toolResults } from "./fake-chat-server.js";
import {
  ALL_SCOPES,
  decisionOn,
  HIGH_RISK_REFUND,
  modelSession,
  startOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";

const suite = useSuite({ orchestrator: false });

/** Runs one session through a fresh orchestrator whose model answers from `script`. */
async function runWith(
  script: ScriptedReply[],
  goal = "How long do card refunds take?",
  extraEnv: Record<string, string> = {},
) {
  const chat = await startFakeChatServer(script);
  const orch = await startOrchestrator(suite.tools, {
    OPENAI_BASE_URL: chat.baseUrl,
    OPENAI_MODEL: "fake-model",
    ...extraEnv,
  });
  try {
    const done = await modelSession(orch, goal);
    const trace = (await orch.api.getTrace({ sessionId: done.sessionId })).records;
    return { done, requests: chat.requests, trace };
  } finally {
    await orch.close();
    await chat.close();
  }
}

const call = toolCall;

describe("openai policy sessions", () => {
  it("turns an unknown tool, malformed JSON and extra fields into ENOTOOL/EINVAL observations and recovers", async () => {
    const { done, requests } = await runWith([
      () => call("kb_lookup", '{"query":"refund"}', "c1"),
      () => call("kb_search_search", '{"query": "refund timelines", limit: 3', "c2"),
      () => call("kb_search_search", '{"query":"refund timelines","limit":3,"verbose":true}', "c3"),
      () => call("kb_search_search", '{"query":"refund timelines","limit":3}', "c4"),
      (req) => {
        const results = toolResults(req);
        const hit = (results.c4 as unknown as { data: { hits: { docId: string; version: number }[] } }).data.hits[0]!;
        return chatCompletion({ content: `See [${hit.docId}@${hit.version}].` });
      },
    ]);
    expect(done.stopReason).toBe("done");
    const last = toolResults(requests.at(-1)!);
    expect(last.c1?.error?.code).toBe("ENOTOOL");
    expect(last.c2?.error?.code).toBe("EINVAL");
    expect(last.c2?.error?.message).toMatch(/not valid JSON/);
    expect(last.c3?.error?.code).toBe("EINVAL");
    expect(last.c3?.error?.message).toMatch(/verbose/);
    expect(last.c4?.ok).toBe(true);
  });

  it("runs several tool calls of one reply one at a time, in order", async () => {
    const { done, trace } = await runWith([
      () =>
        chatCompletion({
          toolCalls: [
            { id: "a", name: "kb_search_search", arguments: '{"query":"refund policy","limit":1}' },
            { id: "b", name: "billing_get_order", arguments: '{"orderId":"ord_DEMO00000001"}' },
          ],
        }),
      () => chatCompletion({ content: "Order ord_DEMO00000001 is paid." }),
    ]);
    expect(done.stopReason).toBe("done");
    const executed = trace
      .map((r) => JSON.parse(r) as { decision: { kind: string; name?: string } })
      .filter((r) => r.decision.kind === "tool_call")
      .map((r) => r.decision.name);
    expect(executed).toEqual(["kb_search_search", "billing_get_order"]);
  });

  it("does not accept an answer citing a refund id no tool returned; the model corrects it", async () => {
    const { done, requests } = await runWith([
      () => chatCompletion({ content: "Refunded, id rf_AAAAAAAAAAAAAAAA." }),
      () => chatCompletion({ content: "I have not made any refund." }),
    ]);
    expect(done.stopReason).toBe("done");
    expect(done.answer).toBe("I have not made any refund.");
    expect(JSON.stringify(requests[1]!.body.messages)).toMatch(/no tool returned/);
  });

  it("does not accept a made-up refund id the model first had quoted back in a refusal (an unknown tool's name)", async () => {
    const { done, requests } = await runWith([
      () => call("rf_AAAAAAAAAAAAAAAA", "{}", "x1"),
      () => chatCompletion({ content: "Refunded, id rf_AAAAAAAAAAAAAAAA." }),
      () => chatCompletion({ content: "I have not made any refund." }),
    ]);
    expect(JSON.stringify(requests[1]!.body.messages)).toMatch(/ENOTOOL/);
    expect(JSON.stringify(requests[2]!.body.messages)).toMatch(/rf_AAAAAAAAAAAAAAAA, which no tool returned/);
    expect(done.answer).toBe("I have not made any refund.");
  });

  it("does not accept an answer citing a document no search returned; the model corrects it", async () => {
    const { done, requests } = await runWith([
      () => call("kb_search_search", '{"query":"refund timelines","limit":1}', "s1"),
      () => chatCompletion({ content: "See [made-up-policy@1]." }),
      (req) => {
        const hit = (toolResults(req).s1 as unknown as { data: { hits: { docId: string; version: number }[] } }).data
          .hits[0]!;
        return chatCompletion({ content: `See [${hit.docId}@${hit.version}].` });
      },
    ]);
    expect(done.stopReason).toBe("done");
    expect(done.answer).not.toContain("made-up-policy");
    expect(JSON.stringify(requests[2]!.body.messages)).toMatch(/made-up-policy@1, which no tool returned/);
  });

  it("stops with no_progress when the same call keeps giving the same result", async () => {
    const same = () => call("kb_search_search", '{"query":"refund","limit":1}');
    const { done } = await runWith([same, same, same, same, same, same]);
    expect(done.stopReason).toBe("no_progress");
    expect(done.usage?.toolCalls).toBe(3);
  });

  it("compresses superseded observations past the context threshold and still finishes", async () => {
    const search = (q: string) => () => call("kb_search_search", JSON.stringify({ query: q, limit: 3 }));
    const chat = await startFakeChatServer([
      search("refund policy"),
      search("refund timelines"),
      search("chargebacks"),
      search("identity verification"),
      search("shipping"),
      search("returns"),
      () => chatCompletion({ content: "Read six searches." }),
    ]);
    const orch = await startOrchestrator(suite.tools, {
      OPENAI_BASE_URL: chat.baseUrl,
      CONTEXT_COMPRESS_TOKENS: "300",
    });
    try {
      const done = await modelSession(orch, "Summarise our policies");
      expect(done.stopReason).toBe("done");
      const stored = await orch.orchestrator.store.get(done.sessionId);
      expect(Number(stored?.context.compressions)).toBeGreaterThan(0);
      const lastRequest = JSON.stringify(chat.requests.at(-1)!.body.messages);
      expect(lastRequest).toContain('\\"compressed\\":true');
    } finally {
      await orch.close();
      await chat.close();
    }
  });

  it("stops with unrecoverable_error when the model endpoint refuses the request", async () => {
    const { done } = await runWith([
      () => ({ status: 400, body: { error: { message: "model not found", type: "invalid_request_error" } } }),
    ]);
    expect(SessionState[done.state]).toBe("FAILED");
    expect(done.stopReason).toBe("unrecoverable_error");
  });

  it("keeps no part of the API key in the answer when the endpoint echoes it across the error's length limit", async () => {
    const key = "9f8e7d6c5b4a39281706f5e4d3c2b1a0cafebabe";
    // The key starts 299 characters into the error's text, where the text shown is cut at 300.
    const pad = "x".repeat(300 - "Incorrect API key provided: ".length - (key.length - 1));
    const message = `Incorrect API key provided: ${pad}${key}. See the docs.`;
    const { done, trace } = await runWith(
      [() => ({ status: 401, body: { error: { message, type: "invalid_request_error" } } })],
      undefined,
      { OPENAI_API_KEY: key },
    );
    expect(done.stopReason).toBe("unrecoverable_error");
    expect(done.answer).toContain("HTTP 401: Incorrect API key provided: xxx");
    const fragments = [...Array(key.length - 7).keys()].map((i) => key.slice(i, i + 8));
    const served = `${done.answer}\n${trace.join("\n")}`;
    expect(fragments.filter((fragment) => served.includes(fragment))).toEqual([]);
  });

  it("is refused at StartSession when no model endpoint is configured", async () => {
    const orch = await startOrchestrator(suite.tools);
    try {
      const error = await refusal(
        orch.api.startSession({ goal: "hi", scopes: ALL_SCOPES, policy: "openai" }),
        CallError,
      );
      expect(error.code).toBe(status.INVALID_ARGUMENT);
      expect(error.fieldViolations[0]?.field).toBe("policy");
    } finally {
      await orch.close();
    }
  });
});

describe("approval expiry", () => {
  it("an approval after expiry is refused and the session ends with approval_denied", async () => {
    const orch = await startOrchestrator(suite.tools, { APPROVAL_TTL_MS: "1000" });
    try {
      const { session } = await orch.api.startSession({
        goal: "Refund",
        task: HIGH_RISK_REFUND as never,
        scopes: ALL_SCOPES,
      });
      const waiting = await waitForSession(
        orch.api,
        session!.sessionId,
        (s) => s.state === SessionState.AWAITING_APPROVAL,
      );
      await new Promise((resolve) => setTimeout(resolve, 1300));
      const shown = waiting.pendingApproval!;
      const error = await refusal(
        orch.approver.resolveApproval(decisionOn(session!.sessionId, shown, true)),
        CallError,
      );
      expect(error.code).toBe(status.FAILED_PRECONDITION);
      expect(error.reason).toBe("APPROVAL_EXPIRED");
      const done = await waitForSession(orch.api, session!.sessionId);
      expect(done.stopReason).toBe("approval_denied");
    } finally {
      await orch.close();
    }
  });

  it("an approver answering after the expiry sweep ended the session is told the approval expired", async () => {
    const orch = await startOrchestrator(suite.tools, {
      APPROVAL_TTL_MS: "1000",
      ORCHESTRATOR_APPROVAL_SWEEP_MS: "50",
    });
    try {
      const { session } = await orch.api.startSession({
        goal: "Refund",
        task: HIGH_RISK_REFUND as never,
        scopes: ALL_SCOPES,
      });
      const id = session!.sessionId;
      const shown = (await waitForSession(orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL))
        .pendingApproval!;
      const done = await waitForSession(orch.api, id);
      expect(done.stopReason).toBe("approval_denied");
      for (const approve of [true, false]) {
        const late = await refusal(orch.approver.resolveApproval(decisionOn(id, shown, approve)), CallError);
        expect([late.code, late.reason]).toEqual([status.FAILED_PRECONDITION, "APPROVAL_EXPIRED"]);
        expect(late.message).toContain(shown.approvalId);
      }
      // An answer naming any other approval learns nothing of the session: as for an id nobody used.
      const other = await refusal(
        orch.approver.resolveApproval(decisionOn(id, { ...shown, approvalId: "apr_00000000000000000000" }, true)),
        CallError,
      );
      expect([other.code, other.reason]).toEqual([status.NOT_FOUND, "SESSION_NOT_FOUND"]);
    } finally {
      await orch.close();
    }
  });
});
