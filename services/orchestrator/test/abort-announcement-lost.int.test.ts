// A cancel made on one replica (B) while the replica running the session (A) has lost its listening connection
// (terminated, and no new connection allowed until the abort has been announced): A never hears the NOTIFY, but once
// listening again it reads the aborts marked meanwhile and stops its run after the refund in flight is recorded. B,
// connecting as a role of its own, is kept deaf meanwhile, so its cancel cannot win the race against A's next move by
// itself: without A's own stop the session would end DONE. Each session ends CANCELLED naming its refund, and nothing
// more is refunded.
import { setTimeout as sleep } from "node:timers/promises";
import { SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  isEnded,
  LOW_RISK_CUSTOMER,
  refundsOf,
  setFaults,
  startOrchestrator,
  startRefund,
  startTools,
  type TestOrchestrator,
  type Tools,
  waitForSession,
} from "./harness.js";

const ORDER = "ord_DEMO00000001";
const SESSIONS = 2;
const LISTENER = "loopguard-orchestrator-listen";
/** Replica B's role: its connections can be refused without refusing A's. */
const B_ROLE = "replica_b";

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const end = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`still not ${what}`);
    await sleep(20);
  }
}

const postgres = testPostgres("abort-announcement-lost");
describe.skipIf(postgres.skip !== null)("an abort announced while the running replica's listener is gone", () => {
  let tools: Tools;
  let a: TestOrchestrator;
  let b: TestOrchestrator;
  /** On the "postgres" database: it allows and refuses connections to the test's database, and ends them. */
  let admin: pg.Client;
  let raw: pg.Client;
  let database: string;

  /** Ends the listening connection of `role` (none can be replaced while connections are refused). */
  async function dropListener(role: string): Promise<void> {
    const { rows } = await admin.query<{ gone: boolean }>(
      `SELECT pg_terminate_backend(pid) AS gone FROM pg_stat_activity
        WHERE datname = $1 AND application_name = $2 AND usename = $3`,
      [database, LISTENER, role],
    );
    expect(rows.filter((r) => r.gone)).toHaveLength(1);
  }

  const states = async (ids: string[]) =>
    (await raw.query<{ state: string }>("SELECT state FROM sessions WHERE id = ANY($1)", [ids])).rows.map(
      (r) => r.state,
    );
  // Pooled connections for what the store does while no new one may open.
  const warm = (o: TestOrchestrator, id: string) =>
    Promise.all(Array.from({ length: 6 }, () => o.orchestrator.store.get(id)));

  beforeAll(async () => {
    await postgres.start();
    const url = await postgres.freshDatabase();
    const address = new URL(url);
    database = decodeURIComponent(address.pathname.slice(1));
    address.pathname = "/postgres";
    admin = new pg.Client({ connectionString: address.toString() });
    await admin.connect();
    raw = new pg.Client({ connectionString: url });
    await raw.connect();
    tools = await startTools();
    a = await startOrchestrator(tools, { ORCHESTRATOR_STORE: url, ORCHESTRATOR_INSTANCE_ID: "replica-a" });
    await raw.query(`CREATE ROLE ${B_ROLE} LOGIN;
      GRANT USAGE ON SCHEMA public TO ${B_ROLE};
      GRANT ALL ON ALL TABLES IN SCHEMA public TO ${B_ROLE};
      GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${B_ROLE}`);
    const asB = new URL(url);
    asB.username = B_ROLE;
    b = await startOrchestrator(tools, {
      ORCHESTRATOR_STORE: asB.toString(),
      ORCHESTRATOR_INSTANCE_ID: "replica-b",
      ORCHESTRATOR_MIGRATE_ON_START: "false",
    });
  }, 180_000);
  afterAll(async () => {
    await admin?.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`).catch(() => undefined);
    await admin?.query(`ALTER ROLE ${B_ROLE} CONNECTION LIMIT -1`).catch(() => undefined);
    await admin?.end();
    await raw?.end();
    await a?.close();
    await b?.close();
    await tools?.stop();
    await postgres.stop();
  }, 60_000);

  it("stops the run once listening again: CANCELLED naming the refund made, with no further refund", async () => {
    const before = (await refundsOf(tools, ORDER)).length;
    // B hears nothing from here until the end.
    await warm(b, "none");
    await admin.query(`ALTER ROLE ${B_ROLE} CONNECTION LIMIT 0`);
    await dropListener(B_ROLE);

    // In flight for less than the refund's 2 s timeout: recorded as made, not as an unknown outcome.
    await setFaults(tools, "billing", { addedLatencyMs: 1800, methods: ["Refund"] });
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i += 1) ids.push(await startRefund(a.api, ORDER, 200, LOW_RISK_CUSTOMER));
    const refunding = async () =>
      (
        await raw.query(
          `SELECT 1 FROM sessions WHERE id = ANY($1) AND state = 'TOOL_EXECUTING' AND pending::text LIKE '%billing_refund%'`,
          [ids],
        )
      ).rowCount === SESSIONS;
    await until(refunding, "refunding");
    await setFaults(tools, "billing", {});
    await warm(a, ids[0]!);

    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS false`);
    await dropListener("postgres");
    const cancels = Promise.allSettled(ids.map((id) => b.api.cancelSession({ sessionId: id, reason: "stop" })));
    // The aborts are announced (into nobody's ears) before A's listener may connect again.
    const marked = async () =>
      (await raw.query("SELECT 1 FROM session_aborts WHERE session_id = ANY($1)", [ids])).rowCount === SESSIONS;
    await until(marked, "announced");
    await admin.query(`ALTER DATABASE "${database}" ALLOW_CONNECTIONS true`);

    await until(async () => !(await states(ids)).includes("TOOL_EXECUTING"), "recorded");
    await sleep(1000);
    // A stopped after recording its refund; B, deaf, has not ended the session yet.
    expect(await states(ids)).not.toContain("DONE");
    await admin.query(`ALTER ROLE ${B_ROLE} CONNECTION LIMIT -1`);

    const cancelled = await cancels;
    const ends = await Promise.all(ids.map((id) => waitForSession(a.api, id, isEnded, 30_000)));
    expect(
      cancelled.map((r) => (r.status === "fulfilled" ? SessionState[r.value.session!.state] : String(r.reason))),
    ).toEqual(ids.map(() => "CANCELLED"));
    for (const s of ends) {
      expect(SessionState[s.state]).toBe("CANCELLED");
      expect(s.answer).toMatch(/^cancelled by [^;]*: stop; already done before the cancel: billing_refund refund:rf_/);
    }
    expect((await refundsOf(tools, ORDER)).length - before).toBe(SESSIONS);
  }, 120_000);
});
