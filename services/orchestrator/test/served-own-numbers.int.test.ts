// The task's own phone and id card written in a shape no redactor knows ("138*0013*8000"): the
// model view finds them by their digits and shows placeholders. What the API serves of the session
// (StartSession, GetSession, ListSessions, WatchSession, GetSessionDetail) must hide them as well, in
// the goal, the task's other text and keys, the answer, and the transitions' words (a tool name the
// model made up of them). GetTrace's step records never hold the goal or the task; what the model and
// the tools wrote in them is masked alike (own-numbers-in-traces).
import { describe, expect, it } from "vitest";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { ALL_SCOPES, LOW_RISK_CUSTOMER, useSuite, waitForSession } from "./harness.js";

const suite = useSuite({ orchestrator: false });

/** The task's phone (+86 138 0013 8000) and id card (110101198003121232) as no shape matches them. */
const STARS = ["138*0013*8000", "110101*19800312*1232", "138 ~ 0013 ~ 8000"];
/** The phone again, in a tool name the model makes up: no such tool, so only the audit trail keeps it. */
const TOOL_NAME = "lookup_138_0013_8000";

const TASK = {
  kind: "refund",
  order_id: "ord_DEMO00000002",
  amount_cents: 500,
  reason: "DAMAGED",
  ...LOW_RISK_CUSTOMER,
  note: `call back on ${STARS[0]}, id ${STARS[1]}`,
  contacts: { [STARS[2]!]: "mobile" },
};

const serialised = (value: unknown) => JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? String(v) : v));

describe("the task's own numbers in shapes only their digits give away", () => {
  it("are hidden by GetSession, ListSessions, WatchSession, GetSessionDetail and GetTrace as in the model's view", async () => {
    let asked = 0;
    const chat = await startFakeChatServer(() =>
      asked++ === 0
        ? chatCompletion({ toolCalls: [{ id: "t1", name: TOOL_NAME, arguments: "{}" }] })
        : chatCompletion({ content: `Called ${STARS[0]}, all good.` }),
    );
    suite.onCleanUp(() => chat.close());
    const orch = await suite.startOrchestrator({ OPENAI_BASE_URL: chat.baseUrl, OPENAI_MODEL: "fake-model" });
    const goal = `Check the customer ${STARS.join(" ; ")} before refunding`;
    const { session } = await orch.api.startSession({
      goal,
      task: TASK as never,
      scopes: ALL_SCOPES,
      policy: "openai",
    });
    const id = session!.sessionId;
    const done = await waitForSession(orch.api, id);
    const watched: unknown[] = [];
    for await (const event of orch.api.watchSession({ sessionId: id })) watched.push(event.event);
    const served = {
      startSession: serialised(session),
      getSession: serialised(done),
      listSessions: serialised((await orch.api.listSessions({})).sessions),
      watchSession: serialised(watched),
      getSessionDetail: serialised(await orch.api.getSessionDetail({ sessionId: id })),
      getTrace: (await orch.api.getTrace({ sessionId: id })).records.join("\n"),
    };
    const sent = chat.requests.map((r) => r.text).join("\n");
    expect(watched.some((e) => (e as { case: string }).case === "transition")).toBe(true);
    // The made-up tool name goes back to the model that wrote it, as its own earlier reply.
    for (const shape of [...STARS, "138_0013_8000"]) {
      if (STARS.includes(shape)) expect.soft(sent.includes(shape), `${shape} sent to the model`).toBe(false);
      for (const [where, text] of Object.entries(served))
        expect.soft(text.includes(shape), `${shape} in ${where}`).toBe(false);
    }
    expect(done.goal).toBe("Check the customer [redacted] ; [redacted] ; [redacted] before refunding");
    expect(done.task).toMatchObject({
      note: "call back on [redacted], id [redacted]",
      contacts: { "[redacted]": "mobile" },
    });
    expect(done.answer).toBe("Called [redacted], all good.");
  });
});
