// Sessions in flight per caller (ORCHESTRATOR_MAX_SESSIONS_PER_CALLER) through the real API: on
// SQLite, and on two orchestrator replicas sharing one PostgreSQL. The sessions are high-risk
// refunds, which stay in flight (waiting for an approval) until someone ends them.
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { refusal } from "@loopguard/test-kit";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import { CallError, createRawClient, type RawClient, status } from "@loopguard/tool-sdk";
import { SESSION_OPERATOR_SCOPES, testToken } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ALL_SCOPES,
  HIGH_RISK_CUSTOMER,
  startOrchestrator,
  type TestOrchestrator,
  useSuite,
  waitForSession,
} from "./harness.js";
import { CREATOR_QUOTA } from "../src/store/postgres-session-sql.js";
import { bind } from "../src/store/postgres-session-statements.js";

type Api = RawClient<typeof OrchestratorService>;

const QUOTA = 5;
const QUOTA_ENV = { ORCHESTRATOR_MAX_SESSIONS_PER_CALLER: String(QUOTA), APPROVAL_TTL_MS: "300000" };
const REFUND = {
  kind: "refund",
  order_id: "ord_DEMO00000008",
  amount_cents: 1000,
  reason: "DAMAGED",
  ...HIGH_RISK_CUSTOMER,
};

const closers: (() => void | Promise<void>)[] = [];
const suite = useSuite({ orchestrator: false });
afterAll(async () => {
  for (const close of closers.reverse()) await close();
});

async function client(orch: TestOrchestrator, subject: string): Promise<Api> {
  const api = createRawClient(OrchestratorService, orch.server.address, {
    token: await testToken({ subject, scopes: SESSION_OPERATOR_SCOPES }),
  });
  closers.push(() => api.close());
  return api;
}

const start = (api: Api, idempotencyKey?: string, deadlineMs?: number) =>
  api.startSession(
    {
      goal: "Refund 10.00 of ord_DEMO00000008",
      task: REFUND as never,
      scopes: ALL_SCOPES,
      ...(idempotencyKey ? { idempotencyKey } : {}),
    },
    deadlineMs === undefined ? {} : { deadline: deadlineMs },
  );

/** Whether each start made a session; anything but a quota refusal fails the test. */
async function race(starts: Promise<unknown>[]): Promise<number> {
  const outcomes = await Promise.all(
    starts.map((p) =>
      p.then(
        () => true,
        (e: unknown) => {
          if (
            !(e instanceof CallError && e.code === status.RESOURCE_EXHAUSTED && e.reason === "SESSION_QUOTA_EXCEEDED")
          )
            throw e;
          return false;
        },
      ),
    ),
  );
  return outcomes.filter(Boolean).length;
}

const mine = async (api: Api) =>
  (await api.listSessions({ pageSize: 500 })).sessions.filter((s) => s.state !== SessionState.CANCELLED);

describe("sessions in flight per caller, on SQLite", () => {
  let orch: TestOrchestrator;
  beforeAll(async () => {
    orch = await startOrchestrator(suite.tools, QUOTA_ENV);
    closers.push(() => orch.close());
  });

  it("a caller at its quota gets RESOURCE_EXHAUSTED with RetryInfo and nothing is created; its key still finds its session; another caller is not held back; an ended session frees a slot", async () => {
    const alice = await client(orch, "quota-alice");
    const first = (await start(alice, "alice-start-key-1")).session!;
    for (let i = 1; i < QUOTA; i += 1) await start(alice);
    for (const s of await mine(alice))
      await waitForSession(alice, s.sessionId, (x) => x.state === SessionState.AWAITING_APPROVAL);

    const refused = await refusal(start(alice), CallError);
    expect([status[refused.code], refused.reason, refused.retryAfterMs, refused.metadata]).toEqual([
      "RESOURCE_EXHAUSTED",
      "SESSION_QUOTA_EXCEEDED",
      5000,
      { quota: "sessions_in_flight_per_caller", limit: String(QUOTA) },
    ]);
    expect(refused.message).toMatch(/ORCHESTRATOR_MAX_SESSIONS_PER_CALLER/);
    expect(await mine(alice)).toHaveLength(QUOTA);
    const overHttp = await fetch(`${orch.httpUrl}/${OrchestratorService.typeName}/StartSession`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${await testToken({ subject: "quota-alice", scopes: SESSION_OPERATOR_SCOPES })}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ goal: "one more", scopes: ["kb:read"] }),
    });
    const { details } = (await overHttp.json()) as { details: { type: string; debug: { reason?: string } }[] };
    expect([
      overHttp.status,
      overHttp.headers.get("retry-after"),
      details.find((d) => d.type === "google.rpc.ErrorInfo")?.debug.reason,
    ]).toEqual([429, "5", "SESSION_QUOTA_EXCEEDED"]);
    expect(await mine(alice)).toHaveLength(QUOTA);

    // A retried start whose first try made a session gets that session, at the quota too.
    expect(await start(alice, "alice-start-key-1")).toMatchObject({
      created: false,
      session: { sessionId: first.sessionId },
    });
    const bob = await client(orch, "quota-bob");
    expect((await start(bob)).created).toBe(true);

    await alice.cancelSession({ sessionId: first.sessionId, reason: "make room" });
    expect((await start(alice)).created).toBe(true);
    expect(await race([start(alice)])).toBe(0);
  });

  it(`${QUOTA * 4} concurrent starts of one caller make exactly ${QUOTA} sessions`, async () => {
    const carol = await client(orch, "quota-carol");
    expect(await race(Array.from({ length: QUOTA * 4 }, () => start(carol)))).toBe(QUOTA);
    expect(await mine(carol)).toHaveLength(QUOTA);
  });
});

const postgres = testPostgres("orchestrator-quota");
describe.skipIf(postgres.skip !== null)("sessions in flight per caller, on two replicas sharing PostgreSQL", () => {
  let replicas: TestOrchestrator[];
  let url: string;
  beforeAll(async () => {
    await postgres.start();
    closers.push(postgres.stop);
    url = await postgres.freshDatabase();
    replicas = [];
    for (const name of ["replica-a", "replica-b"]) {
      const orch = await startOrchestrator(suite.tools, {
        ...QUOTA_ENV,
        ORCHESTRATOR_STORE: url,
        ORCHESTRATOR_INSTANCE_ID: name,
      });
      closers.push(() => orch.close());
      replicas.push(orch);
    }
  }, 120_000);

  it(`${QUOTA * 4} concurrent starts of one caller spread over both replicas make exactly ${QUOTA} sessions; at the quota less one, exactly one more`, async () => {
    const apis = await Promise.all(replicas.map((orch) => client(orch, "quota-dave")));
    const spread = (n: number) => Array.from({ length: n }, (_, i) => start(apis[i % apis.length]!));
    expect(await race(spread(QUOTA * 4))).toBe(QUOTA);
    const made = await mine(apis[1]!);
    expect(made).toHaveLength(QUOTA);
    await apis[0]!.cancelSession({ sessionId: made[0]!.sessionId, reason: "make room" });
    expect(await race(spread(QUOTA * 4))).toBe(1);
    expect(await mine(apis[0]!)).toHaveLength(QUOTA);
  });

  it("a start whose caller's deadline passes while it waits for its turn (another replica holds the caller's lock) is not made; the start ahead of it is", async () => {
    // A lock_timeout well past the test's waits, so the start ahead outlasts the hold.
    const orch = await startOrchestrator(suite.tools, {
      ...QUOTA_ENV,
      ORCHESTRATOR_STORE: `${url}?lock_timeout=10000`,
      ORCHESTRATOR_INSTANCE_ID: "replica-c",
    });
    closers.push(() => orch.close());
    const api = await client(orch, "quota-erin");
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    closers.push(() => raw.end());
    await raw.query("BEGIN");
    await raw.query(bind(CREATOR_QUOTA.lock, { createdBy: "quota-erin" }));
    const ahead = start(api);
    await sleep(200);
    const late = await refusal(start(api, undefined, 300), CallError);
    await raw.query("ROLLBACK");
    expect([status[late.code], (await ahead).created]).toEqual(["DEADLINE_EXCEEDED", true]);
    expect(await mine(api)).toHaveLength(1);
  });
});
