// A WatchSession shows what the session cost, charges made without a move included: the usage of a
// call a cancel cut off, charged to the ended session after the CANCELLED move, reaches the stream
// before it ends (its last update is what GetSession serves), whichever replica runs the session;
// and a charge to a live session (another replica's, no new version) is pushed as an update. The
// stream's one snapshot is its first message; every later showing of the session is an update.
// Real orchestrator processes (one on SQLite; two replicas on one PostgreSQL) and a fake chat server.
import { join } from "node:path";
import {
  OrchestratorService,
  type Session,
  SessionState,
  type WatchSessionResponse,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { SESSION_OPERATOR_SCOPES } from "@loopguard/tool-sdk/testing";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { afterEach, describe, expect, it } from "vitest";
import { PostgresSessionStore } from "../src/store/postgres-session-store.js";
import { chatCompletion, type ScriptedReply, startFakeChatServer } from "./fake-chat-server.js";
import { waitForSession } from "./harness.js";
import { processFixture } from "./process-fixture.js";

const { tempDir, clientFor, startTools, startOrchestrator, cleanUp, onCleanUp } = processFixture("watch-charges");
afterEach(cleanUp);
const postgres = usePostgres("watch-late-charges");

/** A model whose one answer is held until the test's clean-up; `asked` settles once its request arrived. */
function heldModel() {
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
    return chatCompletion({ content: "Refunds are paid back to the card within 5 days." });
  };
  return { replies: [reply], asked };
}

/** `replicas` orchestrator processes on `store` with a priced model; the API of each as an operator. */
async function setUp(replies: ScriptedReply[], store: string, replicas = 1) {
  const tools = await startTools();
  const chat = await startFakeChatServer(replies);
  onCleanUp(() => chat.close());
  const apis = [];
  for (let i = 0; i < replicas; i += 1) {
    const orchestrator = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: store,
      ORCHESTRATOR_INSTANCE_ID: `replica-${i}`,
      LOOPGUARD_DATA_DIR: tempDir(`orchestrator-${i}`),
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: "gpt-4o",
      ORCHESTRATOR_LEASE_TTL_MS: "60000",
    });
    apis.push(
      await clientFor(OrchestratorService, orchestrator.address, SESSION_OPERATOR_SCOPES, { subject: "operator" }),
    );
  }
  return apis;
}

type Api = Awaited<ReturnType<typeof setUp>>[number];

async function startQuestion(api: Api): Promise<string> {
  const { session } = await api.startSession({
    goal: "how long do card refunds take",
    scopes: ["kb:read"],
    policy: "openai",
  });
  return session!.sessionId;
}

/** A WatchSession read on its own: every message so far, and `ended` once the stream ends. */
function watch(api: Api, id: string) {
  const messages: WatchSessionResponse[] = [];
  const ended = (async () => {
    for await (const message of api.watchSession({ sessionId: id })) messages.push(message);
  })();
  onCleanUp(() => ended.catch(() => undefined));
  const updates = () => messages.flatMap(({ event }) => (event.case === "update" ? [event.value] : ([] as Session[])));
  return { messages, ended, updates };
}

const cost = (s: Session) => Number(s.usage?.costMicros ?? 0);

/** The session once the run that did the cut-off work charged it, after the cancel's reply. */
function charged(api: Api, id: string, cancelled: Session): Promise<Session> {
  return waitForSession(api, id, (s) => s.state === SessionState.CANCELLED && cost(s) > cost(cancelled), 10_000);
}

/** Resolves once `arrived()` holds, checked every 50 ms for up to 10 s. */
async function received(arrived: () => boolean, what: string): Promise<void> {
  for (let waited = 0; !arrived(); waited += 50) {
    expect(waited, what).toBeLessThan(10_000);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The stream's one snapshot is its first message: a session shown again later is an update. */
function expectOneSnapshotFirst(watched: ReturnType<typeof watch>): void {
  const cases = watched.messages.map(({ event }) => event.case);
  expect(cases[0]).toBe("snapshot");
  expect(cases.filter((c) => c === "snapshot")).toHaveLength(1);
}

/** Cancels `id` on `canceller` while its model call is held; the stream `watched` ends with what GetSession serves. */
async function cancelWhileThinking(canceller: Api, id: string, watched: ReturnType<typeof watch>): Promise<void> {
  const { session } = await canceller.cancelSession({ sessionId: id, reason: "asked by mistake" });
  expect(SessionState[session!.state]).toBe("CANCELLED");
  await watched.ended;
  const served = await charged(canceller, id, session!);
  expectOneSnapshotFirst(watched);
  expect(watched.messages.at(-1)?.event.case).toBe("update");
  const last = watched.updates().at(-1)!;
  expect(last.usage).toEqual(served.usage);
  expect(last).toMatchObject({ state: SessionState.CANCELLED, version: served.version });
  expect(Number(last.usage!.tokens)).toBeGreaterThan(20);
}

describe("WatchSession and charges made without a move", () => {
  it("a model call a cancel cut off: one snapshot first, and the stream ends with an update of its charge, as GetSession serves it", async () => {
    const model = heldModel();
    const [api] = await setUp(model.replies, `sqlite:${join(tempDir("store"), "orchestrator.db")}`);
    const id = await startQuestion(api!);
    await model.asked;
    const watched = watch(api!, id);
    await cancelWhileThinking(api!, id, watched);
  }, 60_000);

  describe.skipIf(postgres.skip !== null)("two replicas on one PostgreSQL", () => {
    it("watched and cancelled on the replica that does not run the session: the other replica's charge reaches the stream", async () => {
      const model = heldModel();
      const [runner, other] = await setUp(model.replies, await postgres.freshDatabase(), 2);
      const id = await startQuestion(runner!);
      await model.asked;
      const watched = watch(other!, id);
      await cancelWhileThinking(other!, id, watched);
    }, 60_000);

    it("a charge to a live session made elsewhere: pushed as an update of the same version, after the one snapshot", async () => {
      const model = heldModel();
      const url = await postgres.freshDatabase();
      const [api] = await setUp(model.replies, url);
      const id = await startQuestion(api!);
      await model.asked;
      const watched = watch(api!, id);
      await received(() => watched.messages.length > 0, "no snapshot");
      const first = watched.messages[0]!.event;
      expect(first.case).toBe("snapshot");
      const before = first.value as Session;
      const store = await PostgresSessionStore.open(url, { maxConnections: 1 });
      onCleanUp(() => store.close());
      // What another replica's live read charges: one tool call at its price, no new version.
      const read = { tokens: 0, costMicros: 100, toolCalls: 1 };
      expect(await store.charge(id, read, read)).toBe("live");
      await received(() => watched.updates().length > 0, "the charge was never pushed");
      expectOneSnapshotFirst(watched);
      const pushed = watched.updates()[0]!;
      expect(pushed.version).toBe(before.version);
      expect(cost(pushed) - cost(before)).toBe(100);
      expect(pushed.usage!.toolCalls - before.usage!.toolCalls).toBe(1);
      const { session: served } = await api!.getSession({ sessionId: id });
      expect(pushed.usage).toMatchObject({ tokens: served!.usage!.tokens, costMicros: served!.usage!.costMicros });
    }, 60_000);
  });
});
