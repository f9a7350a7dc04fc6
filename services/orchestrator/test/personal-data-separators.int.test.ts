// The task's own phone and id card, written in a goal with separators other than space, "-" and
// ".": a no-break or thin space, a zero-width space inside the number, "/", "_", an en dash, digits
// spaced one by one. Neither the model provider nor GetSession may see them; the model gets the
// placeholders, so it can still name them.
import { describe, expect, it } from "vitest";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, LOW_RISK_CUSTOMER, useSuite, waitForSession } from "./harness.js";

const suite = useSuite({ orchestrator: false });

const TASK = {
  kind: "refund",
  order_id: "ord_DEMO00000002",
  amount_cents: 500,
  reason: "DAMAGED",
  ...LOW_RISK_CUSTOMER,
};

/** The task's phone (+86 138 0013 8000) and id card (110101198003121232) as people paste them. */
const SHAPES = {
  noBreakSpace: "138\u00a00013\u00a08000",
  narrowNoBreakSpace: "138\u202f0013\u202f8000",
  thinSpace: "138\u20090013\u20098000",
  zeroWidthSpace: "1380013\u200b8000",
  slash: "138/0013/8000",
  underscore: "138_0013_8000",
  enDash: "138\u20130013\u20138000",
  oneByOne: "1 3 8 0 0 1 3 8 0 0 0",
  idCardSlash: "110101/19800312/1232",
  idCardZeroWidthSpace: "110101\u200b198003121232",
};
/** A shape no redactor knows, that only the task's own digits give away: the model view and GetSession mask it too. */
const STARS = "138*0013*8000";

async function runSession(goal: string) {
  const chat = await startFakeChatServer(() => chatCompletion({ content: "Noted." }));
  suite.onCleanUp(() => chat.close());
  const orch = await suite.startOrchestrator({ OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" });
  const { session } = await orch.api.startSession({ goal, task: TASK as never, scopes: ALL_SCOPES, policy: "openai" });
  const done = await waitForSession(orch.api, session!.sessionId);
  return { done, sent: chat.requests.map((r) => r.text).join("\n") };
}

describe("the task's phone and id card written with other separators", () => {
  it("reach the model provider only as placeholders, and GetSession only redacted", async () => {
    const goal = `Check the customer before refunding: ${Object.values(SHAPES).join(" ; ")} ; ${STARS}`;
    const { done, sent } = await runSession(goal);
    const seen = (text: string, shape: string) =>
      text.includes(shape) || text.includes(JSON.stringify(shape).slice(1, -1));
    for (const [name, shape] of Object.entries(SHAPES)) {
      expect.soft(seen(sent, shape), `${name} sent to the model`).toBe(false);
      expect.soft(done.goal.includes(shape), `${name} in GetSession's goal`).toBe(false);
    }
    expect(seen(sent, STARS)).toBe(false);
    expect(sent).toContain("{{task.phone}} ; {{task.phone}}");
    expect(sent).toContain("{{task.id_card}} ; {{task.id_card}}");
    expect(done.goal).toBe(
      `Check the customer before refunding: ${Array(Object.keys(SHAPES).length + 1)
        .fill("[redacted]")
        .join(" ; ")}`,
    );
  });
});
