// Work that a session's end overtook is still paid for: when a cancel ends a session while the
// model is answering, the call's tokens and price are charged to the ended session; the cancel cuts
// the call off whichever replica it was made on (on another, its announcement reaches the run), and
// the prompt is charged as if the model had read it; a tool call the cancel cut off is charged its
// price. A model call of a replica that froze
// while another took the session over is charged to the live session. A model's answer whose move
// a store outage lost is charged once the store is back. Real orchestrator processes (one on
// SQLite; replicas on one PostgreSQL, halted for the outage) and a fake chat server speaking the
// OpenAI wire protocol.
import { setTimeout as sleep } from "node:timers/promises";
import { join } from "node:path";
import {
  OrchestratorService,
  type Session,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { metricValue, SESSION_OPERATOR_SCOPES } from "@loopguard/tool-sdk/testing";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import type { ServiceProcess } from "@loopguard/test-kit";
import { afterEach, describe, expect, it } from "vitest";
import { costMicrosOf, DEFAULT_MODEL_PRICES } from "../src/policies/model-prices.js";
import { PostgresSessionStore } from "../src/store/postgres-session-store.js";
import { chatCompletion, type ScriptedReply, startFakeChatServer, toolCall } from "./fake-chat-server.js";
import { setFaults, waitForSession } from "./harness.js";
import { processFixture } from "./process-fixture.js";

const { tempDir, clientFor, startTools, startOrchestrator, cleanUp, onCleanUp } = processFixture("charges");
afterEach(cleanUp);
/** The two-replica cases' server: a fresh database each. */
const postgres = usePostgres("cut-off-charges");

/** A priced model, so the charge shows in costMicros too. */
const MODEL = "gpt-4o";
/**
 * What the fake chat server reports for each completion: near the host's count of these sessions'
 * prompts (some 360 tokens), within the half to twice of it the host believes, so charged as reported.
 */
const REPORTED = { input: 600, output: 40 };
const USAGE = { prompt_tokens: REPORTED.input, completion_tokens: REPORTED.output };

/** A model answer held until `release()` (or the test's clean-up); `asked` settles once its request arrived. */
function heldReply() {
  let arrived!: () => void;
  let release!: () => void;
  const asked = new Promise<void>((resolve) => {
    arrived = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  onCleanUp(async () => release());
  const reply: ScriptedReply = async () => {
    arrived();
    await released;
    return chatCompletion({ content: "Refunds are paid back to the card within 5 days.", usage: USAGE });
  };
  return { reply, asked, release };
}

/** A model whose first answer is held (see heldReply). */
function heldModel() {
  const { reply, ...held } = heldReply();
  return { replies: [reply], ...held };
}

/**
 * Tools, a fake model and `replicas` orchestrator processes on `store`; the API of each as an
 * operator. Leases are long here (the fixture's 1 s lease runs out on a loaded machine), so no
 * replica takes the session over from a runner that stalled: the runner learns of a cancel made
 * elsewhere from its announcement.
 */
async function setUp(replies: ScriptedReply[], store: string, replicas = 1, leaseTtlMs = 60_000) {
  const tools = await startTools();
  const chat = await startFakeChatServer(replies);
  onCleanUp(() => chat.close());
  const apis = [];
  const replicasStarted = [];
  for (let i = 0; i < replicas; i += 1) {
    const orchestrator = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: store,
      ORCHESTRATOR_INSTANCE_ID: `replica-${i}`,
      LOOPGUARD_DATA_DIR: tempDir(`orchestrator-${i}`),
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: MODEL,
      ORCHESTRATOR_LEASE_TTL_MS: String(leaseTtlMs),
    });
    replicasStarted.push(orchestrator);
    apis.push(
      await clientFor(OrchestratorService, orchestrator.address, SESSION_OPERATOR_SCOPES, { subject: "operator" }),
    );
  }
  return { apis, tools, replicas: replicasStarted, chat };
}

/** What a replica's /metrics counts of late spend with `fate`. */
async function lateSpend(replica: ServiceProcess, fate: string): Promise<number> {
  const page = await (await fetch(`http://127.0.0.1:${replica.metricsPort}/metrics`)).text();
  return metricValue(page, "loopguard_session_late_spend_total", { fate });
}

type Api = Awaited<ReturnType<typeof setUp>>["apis"][number];

async function startQuestion(api: Api): Promise<string> {
  const { session } = await api.startSession({
    goal: "how long do card refunds take",
    scopes: ["kb:read"],
    policy: "openai",
  });
  return session!.sessionId;
}

/**
 * The session once its usage shows more than the cancel's reply did: the run that did the work
 * charges it as it stops, after that reply.
 */
function charged(api: Api, id: string, cancelled: Session): Promise<Session> {
  const cost = (s: Session) => Number(s.usage?.costMicros ?? 0);
  return waitForSession(api, id, (s) => s.state === SessionState.CANCELLED && cost(s) > cost(cancelled), 10_000);
}

/** Resolves once the session is in `state`, as WatchSession pushes it (no polling interval to lose). */
async function reached(api: Api, id: string, state: SessionState): Promise<void> {
  const stream = api.watchSession({ sessionId: id })[Symbol.asyncIterator]();
  try {
    for (let r = await stream.next(); !r.done; r = await stream.next()) {
      const { event } = r.value;
      const at =
        event.case === "snapshot" ? event.value.state : event.case === "transition" ? event.value.to : undefined;
      if (at === state) return;
    }
    throw new Error(`session ${id} ended before ${SessionState[state]}`);
  } finally {
    await stream.return?.();
  }
}

describe("work that a cancel or a store outage overtook", () => {
  it("a model call cut off by a cancel on the replica that runs it: its prompt's tokens and price are charged to the cancelled session", async () => {
    const model = heldModel();
    const {
      apis: [api],
      replicas: [replica],
    } = await setUp(model.replies, `sqlite:${join(tempDir("store"), "orchestrator.db")}`);
    const id = await startQuestion(api!);
    await model.asked;
    const { session } = await api!.cancelSession({ sessionId: id, reason: "asked by mistake" });
    expect(SessionState[session!.state]).toBe("CANCELLED");
    const ended = await charged(api!, id, session!);
    // The prompt as the host counted it: no reply came, so nothing reported what the model read.
    const prompt = Number(ended.usage!.tokens);
    expect(prompt).toBeGreaterThan(20);
    expect(Number(ended.usage!.costMicros)).toBe(
      costMicrosOf(DEFAULT_MODEL_PRICES[MODEL], { input: prompt, output: 0 }),
    );
    expect(ended.version).toBe(session!.version);
    expect(await lateSpend(replica!, "charged")).toBe(1);
  }, 60_000);

  describe.skipIf(postgres.skip !== null)(
    "two replicas on one PostgreSQL, the cancel made on the one that does not run the session",
    () => {
      it("a model call the cancel cut off on the replica that runs it: its prompt is charged, and nothing moves the session on", async () => {
        const model = heldModel();
        const {
          apis: [runner, other],
          replicas: [runs],
        } = await setUp(model.replies, await postgres.freshDatabase(), 2);
        const id = await startQuestion(runner!);
        await model.asked;
        // The other replica does not run the session: its cancel is announced to the one that does, which stops its run.
        const { session } = await other!.cancelSession({ sessionId: id, reason: "asked by mistake" });
        expect(SessionState[session!.state]).toBe("CANCELLED");
        expect(Number(session!.usage!.tokens)).toBe(0);
        const ended = await charged(other!, id, session!);
        // The prompt as the host counted it: the call was cut off, and no reply reported what the model read.
        const prompt = Number(ended.usage!.tokens);
        expect(prompt).toBeGreaterThan(20);
        expect(prompt).toBeLessThan(REPORTED.input);
        expect(Number(ended.usage!.costMicros)).toBe(
          costMicrosOf(DEFAULT_MODEL_PRICES[MODEL], { input: prompt, output: 0 }),
        );
        expect(ended).toMatchObject({
          version: session!.version,
          answer: session!.answer,
          stopReason: session!.stopReason,
        });
        expect(await lateSpend(runs!, "charged")).toBe(1);
      }, 60_000);

      it("a tool call the cancel cut off: its price is charged", async () => {
        // The model asks for a Search every time it is asked.
        const search = () => toolCall("kb_search_search", '{"query":"card refunds","limit":3}', "s1");
        const url = await postgres.freshDatabase();
        const {
          apis: [runner, other],
          tools,
        } = await setUp(Array(12).fill(search), url, 2);
        // Each Search answers after 500 ms (inside kb-search's 1 s timeout): time to cancel while it is out.
        await setFaults(tools, "kb-search", { addedLatencyMs: 500 });
        const store = await PostgresSessionStore.open(url, { maxConnections: 1 });
        onCleanUp(() => store.close());
        // On a loaded machine the answer can still beat the cancel (the session then observed it before
        // it ended, and that is no case of this test): a new session tries again, three at most.
        for (let attempt = 1; ; attempt += 1) {
          const id = await startQuestion(runner!);
          await reached(runner!, id, SessionState.TOOL_EXECUTING);
          const { session } = await other!.cancelSession({ sessionId: id, reason: "asked by mistake" });
          expect(SessionState[session!.state]).toBe("CANCELLED");
          const trail = await store.auditTrail(id);
          if (trail.some((r) => r.to === "OBSERVING")) {
            expect(attempt, "the Search answered before the cancel in every attempt").toBeLessThan(3);
            continue;
          }
          const ended = await charged(other!, id, session!).catch((error: Error) => {
            throw new Error(`${error.message}; trail: ${trail.map((r) => r.reason).join(" | ")}`);
          });
          // kb-search's price per call (its contract's cost.micros_per_call), on top of the model call charged before.
          expect(Number(ended.usage!.costMicros) - Number(session!.usage!.costMicros)).toBe(100);
          expect(ended.usage!.tokens).toBe(session!.usage!.tokens);
          expect(ended.version).toBe(session!.version);
          return;
        }
      }, 60_000);

      it("a model call of a replica that froze while the other took the session over: charged to the live session", async () => {
        const first = heldReply();
        const second = heldReply();
        const {
          apis: [api],
          replicas: [frozen, other],
          chat,
        } = await setUp([first.reply, second.reply], await postgres.freshDatabase(), 2, 1000);
        const id = await startQuestion(api!);
        await first.asked;
        // Frozen past its 1 s lease: the other replica claims the session and asks the model again.
        frozen!.child.kill("SIGSTOP");
        try {
          await Promise.race([second.asked, sleep(15_000).then(() => Promise.reject(new Error("no takeover")))]);
        } finally {
          frozen!.child.kill("SIGCONT");
        }
        // On waking, the frozen replica finds its lease lost and stops its run, cutting its model call
        // off: that call's prompt is charged to the session, which the other replica still runs.
        for (let waited = 0; (await lateSpend(frozen!, "charged")) < 1; waited += 100) {
          expect(waited, "the frozen replica never charged its model call").toBeLessThan(15_000);
          await sleep(100);
        }
        const { session: live } = await api!.getSession({ sessionId: id });
        // Live: the other replica's first model call, the session's first decision, is still held.
        expect(SessionState[live!.state]).toBe("IDLE");
        const cutOff = Number(live!.usage!.tokens);
        expect(cutOff).toBeGreaterThan(20);
        expect(Number(live!.usage!.costMicros)).toBe(
          costMicrosOf(DEFAULT_MODEL_PRICES[MODEL], { input: cutOff, output: 0 }),
        );
        // The live run's own answer is added to that charge, not written over it.
        second.release();
        const ended = await waitForSession(api!, id, (s) => s.state === SessionState.DONE, 30_000);
        expect(chat.requests).toHaveLength(2);
        expect(Number(ended.usage!.tokens)).toBe(cutOff + REPORTED.input + REPORTED.output);
        expect(ended.usage!.takeovers).toBe(1);
        expect(await lateSpend(other!, "charged")).toBe(0);
      }, 60_000);
    },
  );

  describe.skipIf(postgres.skip !== null)("one replica on a PostgreSQL that goes down", () => {
    it("a model's answer that came while the store was down: the session asks again once it is back, and every answer is charged", async () => {
      const model = heldModel();
      const answer = () =>
        chatCompletion({ content: "Refunds are paid back to the card within 5 days.", usage: USAGE });
      const {
        apis: [api],
        replicas: [replica],
        chat,
      } = await setUp([...model.replies, ...Array(4).fill(answer)], await postgres.freshDatabase());
      const id = await startQuestion(api!);
      await model.asked;
      await postgres.halt("fast");
      try {
        model.release();
        // The answer's move fails, and the session waits for the store.
        const waits = (line: Record<string, unknown>) =>
          line.msg === "session store unavailable; the session waits for it" && line.session_id === id;
        for (let waited = 0; !replica!.lines.some(waits); waited += 100) {
          expect(waited, "the session never met the outage").toBeLessThan(15_000);
          await sleep(100);
        }
      } finally {
        await postgres.resume();
      }
      const ended = await waitForSession(api!, id, (s) => s.state === SessionState.DONE, 30_000);
      // The held answer and the one asked for after the outage (a first ask again may have met the outage too).
      const answered = chat.requests.length;
      expect(answered).toBeGreaterThanOrEqual(2);
      const each = REPORTED.input + REPORTED.output;
      expect(Number(ended.usage!.tokens)).toBe(each * answered);
      expect(Number(ended.usage!.costMicros)).toBe(answered * costMicrosOf(DEFAULT_MODEL_PRICES[MODEL], REPORTED));
      expect(await lateSpend(replica!, "carried")).toBe(answered - 1);
    }, 60_000);
  });
});
