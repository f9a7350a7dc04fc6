// Two billing processes (dist/main.js, run `pnpm build` first) on one PostgreSQL ledger with its
// default durability (fsync on), started at the same moment: they migrate and seed once, and
// 1,000 concurrent refunds over 200 idempotency keys, each key called on both replicas, refund
// once per key, give every caller of a key the same answer, and refund no order beyond what
// was paid. Prints the figures.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import type { ServiceProcess } from "@loopguard/test-kit";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { testPostgres } from "@loopguard/sql-store/testing";
import { CallError, createRawClient, type RawClient, status } from "@loopguard/tool-sdk";
import { spawnTool, testToken, withBoundTokens } from "@loopguard/tool-sdk/testing";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { POSTGRES_LEDGER_MIGRATIONS } from "../src/postgres-ledger.js";
import { NO_ORDER_REACHES } from "./billing-fixture.js";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const KEYS = 200;
const CALLS = 1000;

const postgres = testPostgres("billing_replicas", { fsync: true });

/** Key k refunds a paid demo order; orders 5 and 7 are asked for more than they have left, so some keys must be refused. */
const PLAN = [
  { orderId: "ord_DEMO00000001", amountCents: (k: number) => 20 + (k % 40) },
  { orderId: "ord_DEMO00000002", amountCents: () => 1000 },
  { orderId: "ord_DEMO00000005", amountCents: () => 150 },
  { orderId: "ord_DEMO00000007", amountCents: () => 10 },
  { orderId: "ord_DEMO00000008", amountCents: (k: number) => 100 + k },
];
const requests = Array.from({ length: KEYS }, (_, k) => {
  const plan = PLAN[k % PLAN.length]!;
  return {
    orderId: plan.orderId,
    amountCents: BigInt(plan.amountCents(k)),
    reason: RefundReason.DAMAGED,
    idempotencyKey: `replica-load-key-${String(k).padStart(4, "0")}`,
    maxRefundedTotalCents: NO_ORDER_REACHES,
  };
});

/** Deterministic shuffle (mulberry32), so a failure can be replayed. */
function shuffled<T>(items: T[], seed: number): T[] {
  let state = seed;
  const random = () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  const out = [...items];
  for (let i = out.length - 1; i > 0; i -= 1) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe.skipIf(postgres.skip !== null)("two billing replicas on one PostgreSQL", () => {
  let url: string;
  let dataDir: string;
  const replicas: ServiceProcess[] = [];
  const clients: RawClient<typeof BillingService>[] = [];

  // Started inside the first test rather than in beforeAll, so that a server that cannot start
  // fails the tests instead of skipping them.
  let started: Promise<void> | undefined;
  const startReplicas = () =>
    (started ??= (async () => {
      if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run \`pnpm build\` first`);
      url = await postgres.freshDatabase();
      dataDir = mkdtempSync(join(tmpdir(), "billing-replicas-"));
      // The one test client stands for many sessions: it may use all 64 of a replica's slots.
      const env = {
        BILLING_PORT: "0",
        BILLING_METRICS_PORT: "0",
        BILLING_MAX_CONCURRENT_PER_CALLER: "64",
        BILLING_STORE: url,
        LOOPGUARD_DATA_DIR: dataDir,
      };
      replicas.push(...(await Promise.all([spawnTool(MAIN, env), spawnTool(MAIN, env)])));
      const token = await testToken({ subject: "replica-test", scopes: ["billing:refund", "billing:read"] });
      clients.push(
        ...replicas.map((r) => withBoundTokens(BillingService, createRawClient(BillingService, r.address, { token }))),
      );
    })());

  beforeAll(postgres.start, 120_000);
  afterAll(async () => {
    for (const c of clients) c.close();
    for (const r of replicas) {
      if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill("SIGTERM");
      await r.exited;
    }
    await postgres.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }, 60_000);

  it("migrated and seeded the new database once although both started at the same moment", async () => {
    await startReplicas();
    const applied = replicas.map((r) => r.lines.find((l) => l.msg === "ledger open")?.migrations_applied as string[]);
    expect(applied.map((a) => a.length).sort()).toEqual([0, POSTGRES_LEDGER_MIGRATIONS.length]);
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      expect(
        (
          await db.query(
            "SELECT order_id, amount_refunded_cents::int AS refunded FROM orders WHERE order_id = 'ord_DEMO00000005'",
          )
        ).rows,
      ).toEqual([{ order_id: "ord_DEMO00000005", refunded: 2500 }]);
      expect((await db.query("SELECT count(*)::int AS n FROM refunds")).rows[0].n).toBe(2);
    } finally {
      await db.end();
    }
  }, 120_000);

  it("refunds each of 200 keys once under 1,000 concurrent calls spread over both replicas", async () => {
    await startReplicas();
    // Call i asks for key i % 200 on replica ⌊i / 200⌋ % 2: each key 3 times on one replica and twice on the other.
    const calls = shuffled(
      Array.from({ length: CALLS }, (_, i) => ({ key: i % KEYS, replica: Math.floor(i / KEYS) % 2 })),
      12,
    );
    const answers: { key: number; replica: number; answer: string; replayed: boolean }[] = [];
    const retried = new Map<string, number>();
    const call = async ({ key, replica }: { key: number; replica: number }) => {
      // Each replica handles 64 calls at once (the default) and sheds the rest; a caller retries a
      // shed or unavailable call with the same key after RetryInfo's delay, jittered, as toolClient does.
      for (let attempt = 1; ; attempt += 1) {
        try {
          const response = await clients[replica]!.refund(requests[key]!, { deadline: 30_000 });
          answers.push({ key, replica, answer: response.refund!.refundId, replayed: response.replayed });
          return;
        } catch (error) {
          if (!(error instanceof CallError)) throw error;
          if ((error.code === status.RESOURCE_EXHAUSTED || error.code === status.UNAVAILABLE) && attempt < 50) {
            const why = error.reason ?? status[error.code];
            retried.set(why, (retried.get(why) ?? 0) + 1);
            await sleep((error.retryAfterMs ?? 100) * (0.5 + Math.random()));
            continue;
          }
          answers.push({ key, replica, answer: `${status[error.code]}/${error.reason}`, replayed: false });
          return;
        }
      }
    };
    const started = performance.now();
    await Promise.all(calls.map(call));
    const seconds = (performance.now() - started) / 1000;

    const byKey = new Map<number, Set<string>>();
    for (const a of answers) byKey.set(a.key, (byKey.get(a.key) ?? new Set()).add(a.answer));
    const refunded = [...byKey].filter(([, set]) => [...set][0]!.startsWith("rf_"));
    const replays = answers.filter((a) => a.replayed).length;
    const fresh = answers.filter((a) => a.answer.startsWith("rf_") && !a.replayed).length;
    const refused = answers.filter((a) => !a.answer.startsWith("rf_"));
    console.log(
      `[billing replicas] ${CALLS} Refund calls over ${KEYS} keys on 2 replicas + 1 PostgreSQL (fsync on): ${seconds.toFixed(2)} s, ` +
        `${Math.round(CALLS / seconds)} calls/s; ${fresh} refunds made, ${replays} replays, ${refused.length} refused ` +
        `(${[...new Set(refused.map((r) => r.answer))].join(", ")}); retries ${JSON.stringify(Object.fromEntries(retried))}`,
    );

    expect(answers).toHaveLength(CALLS);
    // Every caller of a key got the same answer: one refund id, or the same refusal.
    expect([...byKey.values()].filter((set) => set.size !== 1)).toEqual([]);
    expect(fresh).toBe(refunded.length);
    expect(replays).toBe(refunded.length * (CALLS / KEYS) - fresh);
    expect(new Set(refused.map((r) => r.answer))).toEqual(new Set(["FAILED_PRECONDITION/ORDER_NOT_REFUNDABLE"]));

    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const duplicates = await db.query(
        "SELECT idempotency_key FROM refunds GROUP BY idempotency_key HAVING count(*) > 1",
      );
      expect(duplicates.rows).toEqual([]);
      const rows = await db.query<{ idempotency_key: string; refund_id: string }>(
        "SELECT idempotency_key, refund_id FROM refunds WHERE idempotency_key LIKE 'replica-load-key-%'",
      );
      expect(new Map(rows.rows.map((r) => [r.idempotency_key, r.refund_id]))).toEqual(
        new Map(refunded.map(([key, set]) => [requests[key]!.idempotencyKey, [...set][0]!])),
      );
      const orders = await db.query<{ order_id: string; paid: number; refunded: number; sum: number }>(
        `SELECT o.order_id, o.amount_paid_cents AS paid, o.amount_refunded_cents AS refunded,
                COALESCE((SELECT sum(amount_cents) FROM refunds r WHERE r.order_id = o.order_id), 0)::bigint AS sum
           FROM orders o`,
      );
      for (const order of orders.rows) {
        expect(Number(order.refunded), order.order_id).toBe(Number(order.sum));
        expect(Number(order.refunded), order.order_id).toBeLessThanOrEqual(Number(order.paid));
      }
      // The over-asked orders were refunded up to what they had, and no further.
      const refundedOf = (orderId: string) => Number(orders.rows.find((o) => o.order_id === orderId)!.refunded);
      expect(refundedOf("ord_DEMO00000007")).toBe(190);
      expect(refundedOf("ord_DEMO00000005")).toBe(2500 + 36 * 150);
    } finally {
      await db.end();
    }
  }, 120_000);
});
