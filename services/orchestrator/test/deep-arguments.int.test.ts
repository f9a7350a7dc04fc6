// Tool-call arguments nested thousands deep — as a string, or as an already-parsed object some
// servers send — are an EINVAL observation the model can correct, not a session failed on the
// host's stack. A fake OpenAI-compatible endpoint on the real wire protocol, real tools, a real
// orchestrator in process.
import { describe, expect, it } from "vitest";
import { MAX_ARGUMENTS_DEPTH } from "../src/session/model-bounds.js";
import { chatCompletion, type FakeChatServer, type ReceivedRequest, toolResults } from "./fake-chat-server.js";
import { startFakeChatServer } from "./fake-chat-server.js";
import { LOW_RISK_CUSTOMER, modelSession, useSuite } from "./harness.js";

const nest = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;

/** The tool call each session's model asks for first, by its goal; then it answers. */
const FIRST: Record<string, { name: string; arguments: string }> = {
  "search nested in a string": { name: "kb_search_search", arguments: `{"query":${nest(7000)},"limit":1}` },
  "refund nested in a string": {
    name: "billing_refund",
    arguments: `{"orderId":"ord_DEMO00000001","amountCents":100,"reason":"REFUND_REASON_DAMAGED","x":${'{"a":'.repeat(1000)}1${"}".repeat(1000)}}`,
  },
};
/** A reply whose arguments are a JSON object 50,000 deep rather than a string. */
const OBJECT_GOAL = "search nested as an object";

function model(request: ReceivedRequest): unknown {
  const goal = String(request.body.messages[1].content)
    .split("\n")[0]!
    .replace(/^Goal: /, "");
  if (request.body.messages.some((m: { role: string }) => m.role === "tool"))
    return chatCompletion({ content: '{"answer":"The arguments were refused.","confidence":0.9}' });
  if (goal !== OBJECT_GOAL) return chatCompletion({ toolCalls: [{ id: "d1", ...FIRST[goal]! }] });
  const body = JSON.stringify(
    chatCompletion({ toolCalls: [{ id: "d1", name: "kb_search_search", arguments: "__ARGS__" }] }),
  );
  return { status: 200, body: body.replace('"__ARGS__"', `{"query":"refund","x":${nest(50_000)}}`) };
}

let chat: FakeChatServer;
const suite = useSuite({
  orchestrator: async () => {
    chat = await startFakeChatServer(model);
    suite.onCleanUp(() => chat.close());
    return { OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" };
  },
});

describe("tool-call arguments nested thousands deep", () => {
  for (const goal of [...Object.keys(FIRST), OBJECT_GOAL]) {
    it(`${goal}: an EINVAL the model is told, and the session goes on`, async () => {
      const task = { kind: "refund", order_id: "ord_DEMO00000001", amount_cents: 100, reason: "DAMAGED" };
      const done = await modelSession(suite.orch, goal, { ...task, ...LOW_RISK_CUSTOMER });
      expect(done.stopReason).toBe("done");
      expect(done.usage!.toolCalls).toBe(0);
      const last = chat.requests.filter((r) => String(r.headers.traceparent).includes(done.traceId)).at(-1)!;
      expect(Object.values(toolResults(last))).toEqual([
        expect.objectContaining({
          ok: false,
          error: expect.objectContaining({
            code: "EINVAL",
            message: `arguments nested deeper than ${MAX_ARGUMENTS_DEPTH}`,
          }),
        }),
      ]);
    }, 60_000);
  }
});
