// Process-level drills: the orchestrator and the three tools as real processes (dist/main.js,
// so `pnpm build` first), faults made by real SIGKILL. What is asserted is what an operator
// would check afterwards: every session ended, the billing ledger holds each refund once, and
// no personal data reached a trace, a log line or the session store.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { toJsonString } from "@bufbuild/protobuf";
import Database from "better-sqlite3";
import { kill, type ServiceProcess } from "@loopguard/test-kit";
import { BillingService } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import {
  OrchestratorService,
  type Session,
  SessionSchema,
  SessionState,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { ToolAdminService } from "@loopguard/proto/gen/loopguard/tool/v1/admin_pb";
import { CallError, type RawClient } from "@loopguard/tool-sdk";
import { SESSION_OPERATOR_SCOPES } from "@loopguard/tool-sdk/testing";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { PostgresSessionStore } from "../src/store/postgres-session-store.js";
import type { JsonObject } from "../src/store/session-store.js";
import { postgresSkipReason, type PostgresServer, startPostgres } from "@loopguard/sql-store/testing";
import { chatCompletion, startFakeChatServer } from "./fake-chat-server.js";
import { waitForSession } from "./harness.js";
import { processFixture } from "./process-fixture.js";

const ORDER_ID = "ord_DEMO00000002";
const REFUND_CENTS = 100;
const SCOPES = ["kb:read", "billing:read", "billing:refund", "risk:read"];
/** What the drills' callers hold: a session operator who may also answer approvals. */
const OPERATOR_SCOPES = [...SESSION_OPERATOR_SCOPES, "approvals:write"];
const TERMINAL = new Set([SessionState.DONE, SessionState.FAILED, SessionState.CANCELLED]);
const REFUND_ID = /rf_[A-Za-z0-9]{16}/;

type OrchestratorClient = RawClient<typeof OrchestratorService>;

const { tempDir, clientFor, startTools, startOrchestrator, cleanUp, onCleanUp } = processFixture("drill");
afterEach(cleanUp);

function refundTask(extra: Record<string, string> = {}): JsonObject {
  return { kind: "refund", order_id: ORDER_ID, amount_cents: REFUND_CENTS, reason: "DAMAGED", ...extra };
}

/**
 * A call as a well-behaved client makes it: one the orchestrator answers STORE_UNAVAILABLE (its
 * store busy or reconnecting, as when a replica beside it is killed) is made again after the delay
 * it gives, a few times. Starts carry idempotency keys, so a second try never starts a second session.
 */
async function riding<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof CallError) || error.reason !== "STORE_UNAVAILABLE" || attempt === 5) throw error;
      await sleep(error.retryAfterMs ?? 1000);
    }
  }
}

async function startRefunds(
  api: OrchestratorClient,
  count: number,
  keyPrefix: string,
  task: () => JsonObject = refundTask,
): Promise<string[]> {
  const started = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      riding(() =>
        api.startSession({
          goal: `refund ${REFUND_CENTS} cents of ${ORDER_ID}`,
          task: task(),
          scopes: SCOPES,
          policy: "scripted",
          idempotencyKey: `${keyPrefix}-${i}`,
        }),
      ),
    ),
  );
  // A start retried after its first try was stored comes back as that session (created false): count distinct ones.
  const ids = started.map((r) => r.session!.sessionId);
  expect(new Set(ids).size).toBe(count);
  return ids;
}

async function listAll(api: OrchestratorClient): Promise<Session[]> {
  const sessions: Session[] = [];
  let pageToken = "";
  for (let page = 0; page < 100; page += 1) {
    const res = await riding(() => api.listSessions({ pageSize: 500, pageToken }));
    sessions.push(...res.sessions);
    pageToken = res.nextPageToken;
    if (!pageToken) break;
  }
  return sessions;
}

/** Polls until every id is terminal or the bound passes; returns the sessions last seen. */
async function waitTerminal(api: OrchestratorClient, ids: readonly string[], boundMs: number): Promise<Session[]> {
  const wanted = new Set(ids);
  const until = Date.now() + boundMs;
  for (;;) {
    const mine = (await listAll(api)).filter((s) => wanted.has(s.sessionId));
    if ((mine.length === wanted.size && mine.every((s) => TERMINAL.has(s.state))) || Date.now() > until) return mine;
    await sleep(200);
  }
}

/** Polls until at least `min` of `ids` are past IDLE and not yet terminal: sessions a kill interrupts. */
async function waitMidFlight(
  api: OrchestratorClient,
  ids: readonly string[],
  min: number,
  boundMs: number,
): Promise<Session[]> {
  const wanted = new Set(ids);
  const until = Date.now() + boundMs;
  for (;;) {
    const live = (await listAll(api)).filter(
      (s) => wanted.has(s.sessionId) && s.state !== SessionState.IDLE && !TERMINAL.has(s.state),
    );
    if (live.length >= min || Date.now() > until) return live;
    await sleep(50);
  }
}

/** Polls the SQLite store (read-only) until at least `min` sessions wait on a call of `tool`; returns how many did. */
async function waitCallsInFlight(file: string, tool: string, min: number, boundMs: number): Promise<number> {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const count = db.prepare(
      `SELECT count(*) AS n FROM sessions WHERE state = 'TOOL_EXECUTING' AND pending LIKE '%"tool":"${tool}"%'`,
    );
    const until = Date.now() + boundMs;
    for (;;) {
      const { n } = count.get() as { n: number };
      if (n >= min || Date.now() > until) return n;
      await sleep(10);
    }
  } finally {
    db.close();
  }
}

function stateCounts(sessions: readonly Session[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const s of sessions) {
    const key = s.stopReason ? `${SessionState[s.state]}/${s.stopReason}` : SessionState[s.state];
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** One example answer per stop reason other than done, for the drill's report. */
function failureExamples(sessions: readonly Session[]): string[] {
  const seen = new Map<string, string>();
  for (const s of sessions)
    if (s.stopReason && s.stopReason !== "done" && !seen.has(s.stopReason))
      seen.set(s.stopReason, `${s.stopReason}: ${s.answer}`);
  return [...seen.values()];
}

/** `count` sessions, all ended; each DONE one cites a refund, and the ledger holds exactly those refunds, once each. */
async function expectEndedWithOneRefundPerDone(
  billingAddress: string,
  sessions: readonly Session[],
  count: number,
): Promise<void> {
  expect(sessions).toHaveLength(count);
  expect(sessions.filter((s) => !TERMINAL.has(s.state)).map((s) => `${s.sessionId} ${SessionState[s.state]}`)).toEqual(
    [],
  );
  const done = sessions.filter((s) => s.state === SessionState.DONE);
  const cited = done.map((s) => REFUND_ID.exec(s.answer)?.[0]);
  // The answers that cite no refund, so a failure says what those sessions answered.
  expect(done.filter((_, i) => cited[i] === undefined).map((s) => `${s.sessionId}: ${s.answer}`)).toEqual([]);
  const billing = await clientFor(BillingService, billingAddress, ["billing:read"]);
  const { refunds } = await billing.listRefunds({ orderId: ORDER_ID });
  const ids = refunds.map((r) => r.refundId);
  expect(new Set(ids).size).toBe(ids.length);
  expect(ids.length).toBe(done.length);
  expect(refunds.reduce((sum, r) => sum + Number(r.amountCents), 0)).toBe(REFUND_CENTS * done.length);
  expect(new Set(cited)).toEqual(new Set(ids));
}

interface AuditRow {
  session_id: string;
  reason: string | null;
  tool: string | null;
  owner: string | null;
  to?: string;
}

/**
 * The takeovers a session's audit trail (rows in version order) shows: each move by another replica
 * than the move before counts one when that move held the lease (`must`), and maybe one when it
 * handed the lease back (into PARKED or AWAITING_APPROVAL, `may`): the next replica's wake or claim
 * then took an ownerless lease, unless the first one woke it and died before its next move. One
 * more may come that no move shows: the killed instance's last claim of the session, which took a
 * lease (left ownerless by a start on a replica with no free slot, or handed back) and died before
 * its first move, so the trail goes on with the replica that took it next, maybe the same as before.
 */
function takeoversByTrail(rows: readonly AuditRow[]): Map<string, { must: number; may: number }> {
  const counts = new Map<string, { must: number; may: number }>();
  const replica = (r: AuditRow) => r.owner?.split("/")[0];
  for (const [i, r] of rows.entries()) {
    const before = rows[i - 1];
    if (before?.session_id !== r.session_id) {
      counts.set(r.session_id, { must: 0, may: 1 });
      continue;
    }
    const c = counts.get(r.session_id)!;
    if (replica(before) === replica(r)) continue;
    if (before.to === "PARKED" || before.to === "AWAITING_APPROVAL") c.may += 1;
    else c.must += 1;
  }
  return counts;
}

/** Each session counted the takeovers its trail shows (see takeoversByTrail); one that did not prints its trail. */
function expectTakeoversCounted(rows: readonly AuditRow[], sessions: readonly Session[]): void {
  const byTrail = takeoversByTrail(rows);
  const wrong = sessions
    .map((s) => ({ id: s.sessionId, n: s.usage?.takeovers ?? 0, ...(byTrail.get(s.sessionId) ?? { must: 0, may: 1 }) }))
    .filter(({ n, must, may }) => n < must || n > must + may);
  const trails = wrong.map(
    ({ id, n }) =>
      `${id} counted ${n}: ${rows
        .filter((r) => r.session_id === id)
        .map((r) => `${r.owner?.split("/")[0]} ${r.to}`)
        .join(", ")}`,
  );
  expect(
    wrong.map(({ id }) => id),
    trails.join("\n"),
  ).toEqual([]);
  expect([...byTrail.values()].some(({ must }) => must > 0)).toBe(true);
}

/** Sessions whose audit trail shows they were cut off: a re-issued call or a second lease owner. */
function interrupted(rows: readonly AuditRow[]): { reissued: Set<string>; takenOver: Set<string> } {
  const owners = new Map<string, Set<string>>();
  const reissued = new Set<string>();
  for (const r of rows) {
    if (r.reason?.startsWith("re-issuing an interrupted call")) reissued.add(r.session_id);
    if (r.owner) owners.set(r.session_id, (owners.get(r.session_id) ?? new Set()).add(r.owner));
  }
  const takenOver = new Set([...owners].filter(([, o]) => o.size > 1).map(([id]) => id));
  return { reissued, takenOver };
}

describe("orchestrator drills (real processes)", () => {
  it("SIGKILL the orchestrator with 50 sessions running, restart: all 50 reach a terminal state and the billing ledger has no duplicate refund", async () => {
    const tools = await startTools(300);
    // Slow refunds too, so that some are in flight on billing when the orchestrator dies.
    const billingAdmin = await clientFor(ToolAdminService, tools.billing.address, ["tool:admin"], {
      audience: "billing",
    });
    await billingAdmin.setFaults({ profile: { addedLatencyMs: 150, methods: ["Refund"] } });
    const dir = tempDir("sqlite");
    const storeUrl = `sqlite:${join(dir, "orchestrator.db")}`;
    const first = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: storeUrl,
      ORCHESTRATOR_INSTANCE_ID: "drill-first",
      LOOPGUARD_DATA_DIR: dir,
    });
    const firstApi = await clientFor(OrchestratorService, first.address, OPERATOR_SCOPES);

    const ids = await startRefunds(firstApi, 50, `drill-a-${Date.now()}`);
    await sleep(700);
    const midFlight = await waitMidFlight(firstApi, ids, 5, 5000);
    expect(midFlight.length).toBeGreaterThanOrEqual(5);
    // The interesting moment to die is with refunds on the wire: the store's pending call says which.
    const refundsInFlight = await waitCallsInFlight(join(dir, "orchestrator.db"), "billing_refund", 3, 10_000);
    await kill(first);

    const second = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: storeUrl,
      ORCHESTRATOR_INSTANCE_ID: "drill-second",
      LOOPGUARD_DATA_DIR: dir,
    });
    const secondApi = await clientFor(OrchestratorService, second.address, ["sessions:read"]);
    const sessions = await waitTerminal(secondApi, ids, 60_000);

    await expectEndedWithOneRefundPerDone(tools.billing.address, sessions, 50);

    const db = new Database(join(dir, "orchestrator.db"), { readonly: true, fileMustExist: true });
    const rows = db
      .prepare(
        `SELECT session_id, reason, tool, owner, to_state AS "to" FROM session_audit ORDER BY session_id, version`,
      )
      .all() as AuditRow[];
    db.close();
    const { reissued, takenOver } = interrupted(rows);
    const reissuedRefunds = new Set(
      rows
        .filter((r) => r.reason?.startsWith("re-issuing an interrupted call") && r.tool === "billing_refund")
        .map((r) => r.session_id),
    );
    console.log(
      `[drill a] at SIGKILL ${midFlight.length} sessions were mid-flight (${JSON.stringify(stateCounts(midFlight))} when first seen), ` +
        `${refundsInFlight} with a refund call in flight; after restart ${JSON.stringify(stateCounts(sessions))}; ` +
        `${takenOver.size} taken over by the new instance, ${reissued.size} re-issued an interrupted tool call ` +
        `(${reissuedRefunds.size} of them a refund, with the same idempotency key)`,
      ...failureExamples(sessions).map((e) => `\n  ${e}`),
    );
    expect(takenOver.size).toBeGreaterThan(0);
    expect(reissuedRefunds.size).toBeGreaterThan(0);
    // The new instance's claim counted each takeover once. One the first instance parked (a search
    // past its timeout on a loaded machine) handed its lease back: the new one's wake took no lease.
    expectTakeoversCounted(rows, sessions);
    // Resumed, not merely ended: nothing in these sessions fails except the process running them.
    expect(stateCounts(sessions)).toEqual({ "DONE/done": 50 });
  }, 120_000);

  it("SIGTERM the orchestrator with reads in flight, restart: the reads its stop cut off are sent again, no session answers from them", async () => {
    // kb-search answers after 700 ms: a stop lands while sessions wait on it.
    const tools = await startTools(700);
    const dir = tempDir("sigterm");
    const env = (id: string) => ({
      ORCHESTRATOR_STORE: `sqlite:${join(dir, "orchestrator.db")}`,
      ORCHESTRATOR_INSTANCE_ID: id,
      LOOPGUARD_DATA_DIR: dir,
    });
    const first = await startOrchestrator(tools, env("drill-stopped"));
    const api = await clientFor(OrchestratorService, first.address, OPERATOR_SCOPES);
    const ids = await startRefunds(api, 20, `drill-term-${Date.now()}`);
    const readsInFlight = await waitCallsInFlight(join(dir, "orchestrator.db"), "kb_search_search", 5, 10_000);
    expect(readsInFlight).toBeGreaterThanOrEqual(5);
    expect(await kill(first, "SIGTERM")).toBe(0);

    const second = await startOrchestrator(tools, env("drill-next"));
    const sessions = await waitTerminal(
      await clientFor(OrchestratorService, second.address, ["sessions:read"]),
      ids,
      60_000,
    );
    console.log(
      `[drill term] ${readsInFlight} sessions waited on kb-search at SIGTERM; after restart ${JSON.stringify(stateCounts(sessions))}`,
      ...failureExamples(sessions).map((e) => `\n  ${e}`),
    );
    // The stop's own cancel is no answer of the tool's: a session that heard it as one would go on
    // without what it read (asking a human, "the refund policy could not be read (CANCELLED)").
    await expectEndedWithOneRefundPerDone(tools.billing.address, sessions, 20);
    expect(stateCounts(sessions)).toEqual({ "DONE/done": 20 });
    // Each read sent again spent a retry; the stop handed every session back, so none was taken over.
    const db = new Database(join(dir, "orchestrator.db"), { readonly: true, fileMustExist: true });
    const { reissued } = interrupted(
      db.prepare(`SELECT session_id, reason, tool, owner FROM session_audit`).all() as AuditRow[],
    );
    db.close();
    expect(reissued.size).toBeGreaterThan(0);
    expect(sessions.filter((s) => reissued.has(s.sessionId) && (s.usage?.retries ?? 0) < 1)).toEqual([]);
    expect(sessions.filter((s) => (s.usage?.takeovers ?? 0) > 0)).toEqual([]);
  }, 120_000);

  it("SIGSTOP the orchestrator past its lease TTL with reads in flight, SIGCONT: every session ends DONE with one refund, whether its lease was found lost or claimed back", async () => {
    // kb-search answers after 900 ms, the leases last 500 ms: a 700 ms freeze loses them while reads are on the wire.
    const tools = await startTools(900);
    const dir = tempDir("sigstop");
    const orchestrator = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: `sqlite:${join(dir, "orchestrator.db")}`,
      LOOPGUARD_DATA_DIR: dir,
      ORCHESTRATOR_LEASE_TTL_MS: "500",
    });
    const api = await clientFor(OrchestratorService, orchestrator.address, OPERATOR_SCOPES);
    const ids = await startRefunds(api, 20, `drill-stop-${Date.now()}`);
    const readsInFlight = await waitCallsInFlight(join(dir, "orchestrator.db"), "kb_search_search", 5, 10_000);
    // A frozen process (a long GC pause, a throttled or migrated VM): its leases run out meanwhile,
    // so on waking it finds them lost, aborts those runs and claims the sessions again.
    orchestrator.child.kill("SIGSTOP");
    await sleep(700);
    orchestrator.child.kill("SIGCONT");
    const sessions = await waitTerminal(api, ids, 60_000);
    // Which comes first on waking is a race of two overdue timers: the renewal (the lease is found
    // lost, the run stops, its cut-off read must not count as an answer) or a claim (it takes the
    // lease back and the run goes on). Either way the lease ran out, and every session must end right.
    const ranOut = (prefix: string) =>
      orchestrator.lines.filter((l) => String(l.msg).startsWith(prefix)).reduce((sum, l) => sum + Number(l.count), 0);
    const lost = ranOut("session leases lost");
    const claimedBack = ranOut("session leases ran out while their runs went on");
    console.log(
      `[drill stop] ${readsInFlight} sessions waited on kb-search at SIGSTOP; after SIGCONT ${lost} leases found lost, ${claimedBack} claimed back; then ${JSON.stringify(stateCounts(sessions))}`,
      ...failureExamples(sessions).map((e) => `\n  ${e}`),
    );
    expect(lost + claimedBack).toBeGreaterThan(0);
    await expectEndedWithOneRefundPerDone(tools.billing.address, sessions, 20);
    expect(stateCounts(sessions)).toEqual({ "DONE/done": 20 });
  }, 120_000);

  const pgUnavailable = postgresSkipReason();
  if (pgUnavailable) console.warn(`[orchestrator drills] skipping the PostgreSQL replica drill: ${pgUnavailable}`);
  describe.skipIf(pgUnavailable !== null)("on PostgreSQL", () => {
    let server: PostgresServer | undefined;
    afterAll(async () => {
      await server?.stop();
    }, 60_000);

    it("Two replicas on one PostgreSQL, one SIGKILLed mid-load: the other finishes its sessions", async () => {
      server = await startPostgres();
      const url = await server.createDatabase(`drill_${process.pid}`);
      // kb-search answers after 700 ms (within its 1 s timeout): every session is mid-flight for at least that long.
      const tools = await startTools(700);
      const dir = tempDir("replicas");
      const env = (id: string) => ({
        ORCHESTRATOR_STORE: url,
        ORCHESTRATOR_INSTANCE_ID: id,
        LOOPGUARD_DATA_DIR: join(dir, id),
      });
      const [a, b] = await Promise.all([
        startOrchestrator(tools, env("replica-a")),
        startOrchestrator(tools, env("replica-b")),
      ]);
      const [apiA, apiB] = await Promise.all([
        clientFor(OrchestratorService, a.address, OPERATOR_SCOPES),
        clientFor(OrchestratorService, b.address, OPERATOR_SCOPES),
      ]);

      // Opened before the sessions start, so the first look at the leases comes while they run.
      const store = await PostgresSessionStore.open(url, { maxConnections: 2 });
      const key = `drill-b-${Date.now()}`;
      // replica-a's sessions start last, so the look below begins while they wait on kb-search: started
      // first, they could end while replica-b's were still starting on a busy machine (seen in CI).
      const ids = [...(await startRefunds(apiB, 15, `${key}-b`)), ...(await startRefunds(apiA, 15, `${key}-a`))];
      try {
        // Kill replica-a while it holds leases on live sessions.
        let heldByA = 0;
        const until = Date.now() + 5000;
        while (Date.now() < until) {
          const { sessions } = await store.list({ limit: 100 });
          heldByA = sessions.filter(
            (s) =>
              s.leaseOwner?.startsWith("replica-a/") &&
              s.state !== "IDLE" &&
              !["DONE", "FAILED", "CANCELLED"].includes(s.state),
          ).length;
          if (heldByA >= 3) break;
          await sleep(50);
        }
        expect(heldByA).toBeGreaterThanOrEqual(3);
        await kill(a);

        const sessions = await waitTerminal(apiB, ids, 60_000);
        await expectEndedWithOneRefundPerDone(tools.billing.address, sessions, 30);

        const rows: AuditRow[] = [];
        for (const id of ids)
          for (const r of await store.auditTrail(id))
            rows.push({ session_id: id, reason: r.reason, tool: r.tool, owner: r.owner, to: r.to });
        const { reissued, takenOver } = interrupted(rows);
        const bothReplicas = [...takenOver].filter((id) => {
          // A lease owner is the replica's name and a suffix for its process start.
          const owners = new Set(rows.filter((r) => r.session_id === id).map((r) => r.owner?.split("/")[0]));
          return owners.has("replica-a") && owners.has("replica-b");
        });
        console.log(
          `[drill b] replica-a held ${heldByA} live sessions at SIGKILL; final ${JSON.stringify(stateCounts(sessions))}; ` +
            `${bothReplicas.length} sessions carry audit rows of both replicas, ${reissued.size} re-issued an interrupted call`,
          ...failureExamples(sessions).map((e) => `\n  ${e}`),
        );
        expect(bothReplicas.length).toBeGreaterThan(0);
        // Each session replica-b took from replica-a counted the takeover. One replica-a parked (a
        // search past its timeout on a loaded machine) it handed back, and replica-b woke: no takeover.
        // One replica-a held before its first move (started on it, or on replica-b with no free slot
        // and claimed by it) counted one its trail, replica-b's moves alone, does not show (seen in CI).
        expectTakeoversCounted(rows, sessions);
        expect(stateCounts(sessions)).toEqual({ "DONE/done": 30 });
      } finally {
        await store.close();
      }
    }, 180_000);
  });

  it("No id card or phone number appears in any trace, log, store dump, GetTrace or GetSession, whichever way it was written", async () => {
    // A model that puts a phone into a malformed tool call (an EINVAL observation), into a wrongly
    // typed argument (the task's own number: the host sends the task's value) and into its answer.
    const MODEL_ID_CARD = "110101198507212349";
    const chat = await startFakeChatServer([
      () =>
        chatCompletion({
          toolCalls: [
            {
              id: "bad-json",
              name: "risk_query_risk",
              arguments: `{"idCard":"${MODEL_ID_CARD}","phone":(139)12345678,"note":"call back"}`,
            },
          ],
        }),
      () =>
        chatCompletion({
          toolCalls: [
            {
              id: "bad-type",
              name: "risk_query_risk",
              arguments: `{"idCard":"${MODEL_ID_CARD}","phone":8613912345678}`,
            },
          ],
        }),
      () =>
        chatCompletion({
          toolCalls: [
            {
              id: "good",
              name: "risk_query_risk",
              arguments: JSON.stringify({ idCard: MODEL_ID_CARD, phone: "+86 (139) 1234-5678" }),
            },
          ],
        }),
      () =>
        chatCompletion({
          content: `The customer at (139)12345678 (+86 139 1234 5678, id ${MODEL_ID_CARD}) has a low risk score.`,
        }),
    ]);
    onCleanUp(() => chat.close());
    const tools = await startTools(0);
    const dir = tempDir("pii");
    const orchestrator = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: `sqlite:${join(dir, "orchestrator.db")}`,
      LOOPGUARD_DATA_DIR: dir,
      OPENAI_BASE_URL: chat.baseUrl,
      OPENAI_MODEL: "fake-model",
    });
    const api = await clientFor(OrchestratorService, orchestrator.address, OPERATOR_SCOPES);
    // Demo customers of the risk service (all below the approval threshold), written every way
    // the risk contract accepts them: E.164, national, "(139)12345678", "+86 (139) 1234-5678",
    // spaces, hyphens, a bare 86; upper- or lower-case check character.
    const customers = [
      { idCard: "110101198003121232", phone: "+8613800138000" },
      { idCard: "110101198003121232", phone: "86 13800138000" },
      { idCard: "110101198507212349", phone: "13912345678" },
      { idCard: "110101198507212349", phone: "(139)12345678" },
      { idCard: "110101198507212349", phone: "+86 (139) 1234-5678" },
      { idCard: "11010119830405052x", phone: "150 1234 5678" },
      { idCard: "11010119830405052x", phone: "+86-150-1234-5678" },
    ];
    let n = 0;
    const ids = await startRefunds(api, customers.length, `drill-c-${Date.now()}`, () => {
      const c = customers[n++]!;
      return refundTask({ id_card: c.idCard, phone: c.phone });
    });
    // An order of a risky customer (the host reads its risk through the order): the refund waits
    // for approval; its goal and task name a phone and an id card too.
    const risky = { idCard: "110101199212084567", phone: "+86 (186) 1234-5678" };
    const riskyGoal = `refund ${REFUND_CENTS} cents of ord_DEMO00000008 for the customer at ${risky.phone}`;
    const waiting = await api.startSession({
      goal: riskyGoal,
      task: refundTask({ order_id: "ord_DEMO00000008", id_card: risky.idCard, phone: risky.phone }),
      scopes: SCOPES,
      policy: "scripted",
    });
    const model = await api.startSession({
      goal: "How risky is the customer of this task?",
      task: { kind: "risk_check", id_card: MODEL_ID_CARD, phone: "(139)12345678" },
      scopes: SCOPES,
      policy: "openai",
    });

    const sessions = await waitTerminal(api, [...ids, model.session!.sessionId], 60_000);
    expect(sessions.map((s) => [SessionState[s.state], s.stopReason])).toEqual(
      [...ids, model.session!.sessionId].map(() => ["DONE", "done"]),
    );
    const approval = await waitForSession(
      api,
      waiting.session!.sessionId,
      (s) => s.state === SessionState.AWAITING_APPROVAL,
      30_000,
    );
    expect(approval.pendingApproval?.tool).toBe("billing_refund");
    const modelSession = sessions.find((s) => s.sessionId === model.session!.sessionId)!;
    expect(modelSession.answer).toBe(`The customer at [redacted] ([redacted], id [redacted]) has a low risk score.`);

    // Every way of writing these numbers: the digits with any separators between them.
    const nationals = ["13800138000", "13912345678", "15012345678", "18612345678"];
    const idCards = [...customers.map((c) => c.idCard), risky.idCard];
    const needles = [
      ...nationals.map((digits) => new RegExp(digits.split("").join("[ ()+-]*"))),
      ...idCards.map((idCard) => new RegExp(idCard.slice(0, 17), "i")),
    ];
    const leaks: string[] = [];
    const scan = (where: string, text: string) => {
      for (const needle of needles)
        if (needle.test(text)) leaks.push(`${where}: ${needle.source} in ${text.slice(0, 300)}`);
    };
    const allIds = [...ids, waiting.session!.sessionId, model.session!.sessionId];

    const traceDir = join(dir, "traces");
    const traceFiles = readdirSync(traceDir).filter((f) => f.endsWith(".jsonl"));
    let riskTraceLines = 0;
    let einvalLines = 0;
    const tracedSessions = new Set<string>();
    for (const file of traceFiles) {
      for (const line of readFileSync(join(traceDir, file), "utf8").split("\n").filter(Boolean)) {
        scan(`trace ${file}`, line);
        tracedSessions.add(String((JSON.parse(line) as { session_id: string }).session_id));
        if (line.includes("risk_query_risk")) riskTraceLines += 1;
        if (line.includes('"EINVAL"')) einvalLines += 1;
      }
    }
    expect([...tracedSessions].sort()).toEqual([...allIds].sort());
    expect(riskTraceLines).toBeGreaterThan(customers.length);
    // The malformed call; the wrongly typed phone is the task's own number, which the host puts in its place.
    expect(einvalLines).toBe(1);

    for (const id of allIds) {
      for (const record of (await api.getTrace({ sessionId: id })).records) scan(`GetTrace ${id}`, record);
      const { session } = await api.getSession({ sessionId: id });
      scan(`GetSession ${id}`, toJsonString(SessionSchema, session!));
    }

    const named: [string, ServiceProcess][] = [
      ["orchestrator", orchestrator],
      ["kb-search", tools.kb],
      ["billing", tools.billing],
      ["risk", tools.risk],
    ];
    for (const [name, proc] of named) for (const line of proc.lines) scan(`${name} log`, JSON.stringify(line));

    const db = new Database(join(dir, "orchestrator.db"), { readonly: true, fileMustExist: true });
    try {
      const tables = (
        db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table'`).all() as { name: string }[]
      ).map((t) => t.name);
      expect(tables).toEqual(expect.arrayContaining(["sessions", "session_audit", "session_steps"]));
      let callerInput = "";
      for (const table of tables) {
        for (const row of db.prepare(`SELECT * FROM "${table}"`).all() as Record<string, unknown>[]) {
          for (const [column, value] of Object.entries(row)) {
            if (table === "sessions" && (column === "task" || column === "goal")) callerInput += String(value);
            else scan(`store ${table}.${column}`, String(value));
          }
        }
      }
      // The goal and the task are the caller's input and keep the identifiers (the risk call
      // needs them); finding them there shows the scan looks at real data.
      for (const c of [...customers, risky]) {
        expect(callerInput).toContain(c.idCard);
        expect(callerInput).toContain(c.phone);
      }
      expect(callerInput).toContain(riskyGoal);
    } finally {
      db.close();
    }
    expect(leaks).toEqual([]);
  }, 120_000);
});
