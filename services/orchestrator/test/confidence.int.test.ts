// A policy's confidence, as people meet it: a refund the model proposes below CONFIDENCE_THRESHOLD
// waits for another person's approval, with the model's reason in it, and is made once approved; a
// question answered below it ends partial with the reason and waits for no one. The model is an
// OpenAI-compatible server on loopback; tools, ledger and orchestrator API are real.
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { type Session, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { chatCompletion, type ScriptedReply, startFakeChatServer, toolCall, toolResults } from "./fake-chat-server.js";
import { ALL_SCOPES, decisionOn, refundsOf, type TestOrchestrator, useSuite, waitForSession } from "./harness.js";
import { waiting } from "./money-fixture.js";

// One set of tool processes for the file (each refund test uses its own order of the same low-risk customer).
const suite = useSuite({ orchestrator: false });

/** An orchestrator in this process whose openai policy answers from `script`. */
async function withModel(script: ScriptedReply[], env: Record<string, string> = {}): Promise<TestOrchestrator> {
  const chat = await startFakeChatServer(script);
  suite.onCleanUp(() => chat.close());
  return suite.startOrchestrator({ OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model", ...env });
}

async function amountsOf(orderId: string): Promise<number[]> {
  return (await refundsOf(suite.tools, orderId)).map((r) => Number(r.amountCents));
}

const refundTask = (orderId: string) => ({ kind: "refund", order_id: orderId, amount_cents: 300, reason: "DAMAGED" });
const UNSURE = "the customer says it arrived damaged but sent no photo";

/** The model proposes the refund of `orderId` with `confidence`, then answers citing the refund id it got back. */
function refundScript(orderId: string, confidence: number): ScriptedReply[] {
  const args = JSON.stringify({ orderId, amountCents: 300, reason: "REFUND_REASON_DAMAGED" });
  return [
    () =>
      chatCompletion({
        content: JSON.stringify({ confidence, uncertainty_reason: UNSURE }),
        toolCalls: [{ id: "r1", name: "billing_refund", arguments: args }],
      }),
    (req) => {
      const refundId = (toolResults(req).r1 as unknown as { data: { refund: { refundId: string } } }).data.refund
        .refundId;
      return chatCompletion({
        content: JSON.stringify({
          answer: `Refunded 300 cents; refund id ${refundId}.`,
          confidence: 0.9,
          uncertainty_reason: "",
        }),
      });
    },
  ];
}

async function states(orch: TestOrchestrator, id: string): Promise<string[]> {
  return (await orch.orchestrator.store.auditTrail(id)).map((a) => a.to);
}

describe("a refund proposed below the confidence threshold", () => {
  it("waits for another person's approval, with the model's reason and an expiry; approved, it is made once and the session succeeds", async () => {
    const orch = await withModel(refundScript("ord_DEMO00000001", 0.3));
    const { session } = await orch.api.startSession({
      goal: "Refund 3.00 of ord_DEMO00000001",
      task: refundTask("ord_DEMO00000001") as never,
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const id = session!.sessionId;
    const held = await waitForSession(orch.api, id, waiting);
    expect(SessionState[held.state]).toBe("AWAITING_APPROVAL");
    const approval = held.pendingApproval!;
    expect(approval.tool).toBe("billing_refund");
    expect(approval.reason).toContain(`policy confidence 0.3 is below 0.6: ${UNSURE}`);
    expect(timestampMs(approval.expiresAt!)).toBeGreaterThan(Date.now());
    expect(await amountsOf("ord_DEMO00000001")).toEqual([]);

    await orch.approver.resolveApproval(decisionOn(id, approval, true, "photo received by mail"));
    const done = await waitForSession(orch.api, id);
    expect([SessionState[done.state], done.outcome?.kind, done.confidence, done.uncertaintyReason]).toEqual([
      "DONE",
      "succeeded",
      0.9,
      "",
    ]);
    expect(await amountsOf("ord_DEMO00000001")).toEqual([300]);
  });

  it("goes through without waiting at or above the threshold (CONFIDENCE_THRESHOLD=0.25 here)", async () => {
    const orch = await withModel(refundScript("ord_DEMO00000009", 0.3), { CONFIDENCE_THRESHOLD: "0.25" });
    const { session } = await orch.api.startSession({
      goal: "Refund 3.00 of ord_DEMO00000009",
      task: refundTask("ord_DEMO00000009") as never,
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const done = await waitForSession(orch.api, session!.sessionId);
    expect([SessionState[done.state], done.outcome?.kind]).toEqual(["DONE", "succeeded"]);
    expect(await states(orch, session!.sessionId)).not.toContain("AWAITING_APPROVAL");
    expect(await amountsOf("ord_DEMO00000009")).toEqual([300]);
  });
});

describe("a confidence stated with several calls", () => {
  it("holds for each of them: a refund after a search in the same reply waits for a person, as it would first", async () => {
    const refund = JSON.stringify({ orderId: "ord_DEMO00000010", amountCents: 300, reason: "REFUND_REASON_DAMAGED" });
    const orch = await withModel([
      () =>
        chatCompletion({
          content: JSON.stringify({ confidence: 0.3, uncertainty_reason: UNSURE }),
          toolCalls: [
            { id: "s1", name: "kb_search_search", arguments: '{"query":"damaged item refund","limit":2}' },
            { id: "r1", name: "billing_refund", arguments: refund },
          ],
        }),
    ]);
    const { session } = await orch.api.startSession({
      goal: "Refund 3.00 of ord_DEMO00000010",
      task: refundTask("ord_DEMO00000010") as never,
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const held = await waitForSession(orch.api, session!.sessionId, waiting);
    expect([SessionState[held.state], held.pendingApproval?.tool]).toEqual(["AWAITING_APPROVAL", "billing_refund"]);
    expect(held.pendingApproval?.reason).toContain(`policy confidence 0.3 is below 0.6: ${UNSURE}`);
    expect(await amountsOf("ord_DEMO00000010")).toEqual([]);
  });
});

describe("a question's answer and its confidence", () => {
  /** Searches once, then answers with `reply` (the model's whole text). */
  async function ask(reply: string): Promise<{ done: Session; seen: string[]; trace: string[] }> {
    const orch = await withModel([
      () => toolCall("kb_search_search", '{"query":"card refund time","limit":3}', "s1"),
      () => chatCompletion({ content: reply }),
    ]);
    const { session } = await orch.api.startSession({
      goal: "How long do card refunds take?",
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const done = await waitForSession(orch.api, session!.sessionId);
    const trace = (await orch.api.getTrace({ sessionId: session!.sessionId })).records;
    return { done, seen: await states(orch, session!.sessionId), trace };
  }

  it("below the threshold ends partial with low_confidence and the model's reason, without waiting for anyone", async () => {
    const { done, seen, trace } = await ask(
      JSON.stringify({
        answer: "Card refunds take 5 to 10 business days.",
        confidence: 0.35,
        uncertainty_reason: "the documents disagree",
      }),
    );
    expect([SessionState[done.state], done.stopReason, done.answer]).toEqual([
      "DONE",
      "done",
      "Card refunds take 5 to 10 business days.",
    ]);
    expect(done.outcome).toMatchObject({
      kind: "partial",
      reason: "low_confidence: confidence 0.35 is below 0.6: the documents disagree",
    });
    expect([done.confidence, done.uncertaintyReason]).toEqual([0.35, "the documents disagree"]);
    expect(seen).not.toContain("AWAITING_APPROVAL");
    // The trace's final step says how sure the model was.
    const final = trace
      .map((r) => JSON.parse(r) as { decision: { kind: string; confidence?: number; uncertaintyReason?: string } })
      .find((r) => r.decision.kind === "final");
    expect(final?.decision).toMatchObject({ confidence: 0.35, uncertaintyReason: "the documents disagree" });
  });

  it("with a high confidence succeeds", async () => {
    const { done } = await ask(
      JSON.stringify({ answer: "Card refunds take 5 to 10 business days.", confidence: 0.92, uncertainty_reason: "" }),
    );
    expect([done.outcome?.kind, done.confidence, done.uncertaintyReason]).toEqual(["succeeded", 0.92, ""]);
  });

  it("in plain text, with no confidence, counts as 0 (model gave no confidence) and ends partial", async () => {
    const { done } = await ask("Card refunds take 5 to 10 business days.");
    expect(done.answer).toBe("Card refunds take 5 to 10 business days.");
    expect(done.outcome).toMatchObject({
      kind: "partial",
      reason: "low_confidence: confidence 0 is below 0.6: model gave no confidence",
    });
    expect([done.confidence, done.uncertaintyReason]).toEqual([0, "model gave no confidence"]);
  });
});
