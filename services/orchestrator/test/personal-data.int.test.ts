// Personal data stays with the host: a real orchestrator in-process with the real tool processes,
// and a local OpenAI-compatible model that records every request it is sent. The model sees the
// task's id card and phone only as placeholders; risk gets the real values; a model that writes
// anyone else's is refused before any call.
import { redactText } from "@loopguard/tool-sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HistoryItem } from "../src/policies/policy.js";
import { chatCompletion, type ScriptedReply, startFakeChatServer, toolCall, toolResults } from "./fake-chat-server.js";
import {
  ALL_SCOPES,
  LOW_RISK_CUSTOMER,
  startOrchestrator,
  startRefund,
  startTools,
  type Tools,
  waitForSession,
} from "./harness.js";

let tools: Tools;
beforeAll(async () => {
  tools = await startTools();
});
afterAll(async () => {
  await tools?.stop();
});

const TASK = {
  kind: "refund",
  order_id: "ord_DEMO00000002",
  amount_cents: 500,
  reason: "DAMAGED",
  ...LOW_RISK_CUSTOMER,
};
/** The customer's data in every shape the test writes it; none may reach the model. */
const LITERALS = ["110101198003121232", "13800138000", "0013 8000", "19800312", "0013-8000"];

/** Runs one openai-policy session on TASK whose model answers from `script`. */
async function runWith(goal: string, script: ScriptedReply[]) {
  const chat = await startFakeChatServer(script);
  const orch = await startOrchestrator(tools, { OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" });
  try {
    const { session } = await orch.api.startSession({
      goal,
      task: TASK as never,
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    return { done: await waitForSession(orch.api, session!.sessionId), requests: chat.requests };
  } finally {
    await orch.close();
    await chat.close();
  }
}

/** How many QueryRisk calls risk has handled, from its own metrics. */
async function riskQueries(): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${tools.risk.metricsPort}/metrics`)).text();
  const lines = page
    .split("\n")
    .filter((line) => line.startsWith("grpc_server_handled_total{") && line.includes('grpc_method="QueryRisk"'));
  return lines.reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0);
}

describe("personal data and the model", () => {
  it("sends the model placeholders only, in the task and the goal, while risk is called with the customer's real id card and phone", async () => {
    const { done, requests } = await runWith(
      "Check the risk of customer 138 0013 8000 (id 110101-19800312-1232) before refunding",
      [
        (req) => {
          const task = JSON.parse(String(req.body.messages[1].content).split("Task (JSON):\n")[1]!) as Record<
            string,
            string
          >;
          return toolCall("risk_query_risk", JSON.stringify({ idCard: task.id_card, phone: task.phone }), "r1");
        },
        (req) =>
          chatCompletion({
            content: `Customer {{task.phone}} has risk score ${(toolResults(req).r1 as unknown as { data: { riskScore: number } }).data.riskScore}.`,
          }),
      ],
    );
    expect(done.stopReason).toBe("done");
    // Score 5 is the demo customer's: risk found them by the real values the host put in.
    expect(done.answer).toBe("Customer {{task.phone}} has risk score 5.");
    expect(requests).toHaveLength(2);
    expect(requests[0]!.body.messages[1].content).toContain(
      "Goal: Check the risk of customer {{task.phone}} (id {{task.id_card}}) before refunding",
    );
    for (const request of requests) {
      expect(redactText(request.text)).toBe(request.text);
      for (const literal of LITERALS) expect(request.text).not.toContain(literal);
    }
    expect(requests[1]!.text).toContain('{\\"idCard\\":\\"{{task.id_card}}\\",\\"phone\\":\\"{{task.phone}}\\"}');
  });

  it("refuses a call with another person's id card as EPRECOND, naming the bound, and never calls risk", async () => {
    const before = await riskQueries();
    const { done, requests } = await runWith("Check the customer's risk", [
      () =>
        toolCall("risk_query_risk", JSON.stringify({ idCard: "11010519491231002X", phone: "{{task.phone}}" }), "r1"),
      (req) => chatCompletion({ content: `Not allowed: ${toolResults(req).r1?.error?.code}` }),
    ]);
    expect(done.answer).toBe("Not allowed: EPRECOND");
    expect(toolResults(requests[1]!).r1?.error).toMatchObject({
      code: "EPRECOND",
      message:
        "risk_query_risk.idCard must be the task's id_card ({{task.id_card}}); the host reads personal data only for the people the task names",
    });
    expect(done.usage?.toolCalls).toBe(0);
    expect(await riskQueries()).toBe(before);
    expect(requests[1]!.text).not.toContain("11010519491231002X");
  });
});

describe("the scripted policy", () => {
  it("still refunds to DONE, its risk call written with placeholders the host filled in", async () => {
    const orch = await startOrchestrator(tools);
    try {
      const id = await startRefund(orch.api, "ord_DEMO00000001", 500, LOW_RISK_CUSTOMER);
      const done = await waitForSession(orch.api, id);
      expect(done.stopReason).toBe("done");
      expect(done.answer).toMatch(/refund id rf_[A-Za-z0-9]{16}/);
      const history = (await orch.orchestrator.store.get(id))!.context.history as unknown as HistoryItem[];
      const risk = history.filter((item) => item.kind !== "rejected_answer" && item.tool === "risk_query_risk");
      expect(risk[0]).toMatchObject({
        kind: "call",
        arguments: JSON.stringify({ idCard: "{{task.id_card}}", phone: "{{task.phone}}" }),
      });
      expect(risk[1]).toMatchObject({ kind: "observation", envelope: { ok: true, data: { riskScore: 5 } } });
    } finally {
      await orch.close();
    }
  });
});
