// A tool down for longer than the session's retry budget lasts: the session gives up saying that
// its retry budget, not its wall clock, ran out, and charges what went out (the call's retries and
// its price), as an observed failure is charged. Real tool processes in an outage set by their
// admin RPC, a fake model that speaks the OpenAI protocol.
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, setFaults, useSuite, waitForSession } from "./harness.js";

const MODEL = "gpt-4o-mini";
/** billing's GetOrder price (its contract's cost.micros_per_call). */
const GET_ORDER_MICROS = 50;

const suite = useSuite({
  orchestrator: async () => {
    const chat = await startFakeChatServer(() =>
      chatCompletion({
        toolCalls: [{ id: "c1", name: "billing_get_order", arguments: '{"orderId":"ord_DEMO00000001"}' }],
      }),
    );
    suite.onCleanUp(() => chat.close());
    // The model costs nothing here, so the session's cost is its tool calls'.
    return {
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: MODEL,
      MODEL_PRICES: JSON.stringify({ [MODEL]: { input: 0, output: 0 } }),
    };
  },
});

describe("a tool down past the session's retry budget", () => {
  it("ends tool_unavailable long before the wall clock, saying the retry budget was spent, with the call's retries and price charged", async () => {
    await setFaults(suite.tools, "billing", { outage: true, methods: ["GetOrder"] });
    try {
      const started = Date.now();
      const { session } = await suite.orch.api.startSession({
        goal: "What is the status of order ord_DEMO00000001?",
        task: { order_id: "ord_DEMO00000001" } as never,
        scopes: ALL_SCOPES,
        policy: "openai",
        budget: { maxRetries: 1, maxWallClockMs: 120_000 },
      });
      const done = await waitForSession(suite.orch.api, session!.sessionId, undefined, 60_000);
      expect([SessionState[done.state], done.stopReason]).toEqual(["FAILED", "tool_unavailable"]);
      expect(Date.now() - started).toBeLessThan(30_000);
      expect(done.answer).toMatch(
        /^billing was unavailable \(UNAVAILABLE[^)]*\) until the session's retry budget was spent \(1 of 1 retries\); nothing was done: billing_get_order was not made\.$/,
      );
      expect(done.usage!.retries).toBe(1);
      expect(Number(done.usage!.costMicros)).toBe(GET_ORDER_MICROS);
    } finally {
      await setFaults(suite.tools, "billing", {});
    }
  }, 60_000);
});
