import { setTimeout as sleep } from "node:timers/promises";
import { refusal } from "@loopguard/test-kit";
import { MIGRATIONS_TABLE } from "@loopguard/sql-store";
import { startTcpProxy } from "@loopguard/sql-store/testing";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { DEMO_ORDERS } from "../src/demo-orders.js";
import { LedgerError, type RefundLedger } from "../src/ledger.js";
import { POSTGRES_LEDGER_MIGRATIONS, PostgresRefundLedger } from "../src/postgres-ledger.js";
import { describeRefundLedger } from "./ledger.suite.js";

const { skip, freshDatabase } = usePostgres("billing");

describeRefundLedger(
  "postgres",
  async () => {
    const url = await freshDatabase();
    const ledger = await PostgresRefundLedger.open(url);
    await ledger.seed(DEMO_ORDERS);
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    return {
      ledger,
      openAnother: (options) => PostgresRefundLedger.open(url, options),
      refundRows: async (orderId) =>
        (
          await raw.query(
            "SELECT amount_cents::int, idempotency_key FROM refunds WHERE order_id = $1 ORDER BY created_at, seq",
            [orderId],
          )
        ).rows,
      async holdLock(orderId) {
        const holder = new pg.Client({ connectionString: url });
        await holder.connect();
        await holder.query("BEGIN");
        await holder.query("SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE", [orderId]);
        return async () => {
          await holder.query("ROLLBACK");
          await holder.end();
        };
      },
      async close() {
        await ledger.close();
        await raw.end();
      },
    };
  },
  skip ? { skip } : {},
);

describe.skipIf(skip !== null)("the PostgreSQL ledger", () => {
  const command = {
    orderId: "ord_DEMO00000002",
    amountCents: 700,
    reason: 1,
    idempotencyKey: "pg-only-key-00000001",
    maxRefundedTotalCents: 0,
    at: new Date(),
  };

  it("migrates and seeds once when four replicas open one new database at the same moment", async () => {
    const url = await freshDatabase();
    const replicas = await Promise.all(Array.from({ length: 4 }, () => PostgresRefundLedger.open(url)));
    try {
      await Promise.all(replicas.map((r) => r.seed(DEMO_ORDERS)));
      expect(replicas.map((r) => r.migrationsApplied.length).sort()).toEqual([
        0,
        0,
        0,
        POSTGRES_LEDGER_MIGRATIONS.length,
      ]);
      const raw = new pg.Client({ connectionString: url });
      await raw.connect();
      try {
        expect((await raw.query(`SELECT name FROM ${MIGRATIONS_TABLE} WHERE store = 'billing'`)).rows).toEqual(
          POSTGRES_LEDGER_MIGRATIONS.map((m) => ({ name: m.name })),
        );
        expect((await raw.query("SELECT count(*)::int AS n FROM orders")).rows[0].n).toBe(DEMO_ORDERS.length);
        expect((await raw.query("SELECT count(*)::int AS n FROM refunds")).rows[0].n).toBe(2);
      } finally {
        await raw.end();
      }
      expect(await replicas[0]!.getOrder("ord_DEMO00000005")).toMatchObject({ amountRefundedCents: 2500, version: 2 });
    } finally {
      await Promise.all(replicas.map((r) => r.close()));
    }
  });

  it("makes an in-flight duplicate wait for the first call and replay its refund", async () => {
    const url = await freshDatabase();
    const [a, b] = await Promise.all([PostgresRefundLedger.open(url), PostgresRefundLedger.open(url)]);
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await a.seed(DEMO_ORDERS);
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE", [command.orderId]);
      let settled = 0;
      const calls = [a, b].map((l) => l.refund(command).finally(() => (settled += 1)));
      await sleep(200);
      expect(settled).toBe(0);
      await holder.query("ROLLBACK");
      const [first, second] = await Promise.all(calls);
      expect(first!.refund.refundId).toBe(second!.refund.refundId);
      expect([first!.replayed, second!.replayed].sort()).toEqual([false, true]);
      expect((await a.listRefunds(command.orderId))?.refunds).toHaveLength(1);
    } finally {
      await holder.end();
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("does not make a refund whose caller gave up while it waited for the order's lock", async () => {
    const url = await freshDatabase();
    const ledger = await PostgresRefundLedger.open(url);
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    try {
      await ledger.seed(DEMO_ORDERS);
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE", [command.orderId]);
      const caller = new AbortController();
      const refunding = refusal(ledger.refund({ ...command, signal: caller.signal }), Error);
      await sleep(100);
      caller.abort(new Error("the caller's deadline passed"));
      await sleep(50);
      await holder.query("ROLLBACK");
      expect((await refunding).message).toBe("the caller's deadline passed");
      expect(await ledger.listRefunds(command.orderId)).toEqual({ refunds: [] });
      expect(await ledger.getOrder(command.orderId)).toMatchObject({ amountRefundedCents: 0, version: 1 });
    } finally {
      await holder.end();
      await ledger.close();
    }
  });

  it("answers LEDGER_UNAVAILABLE within its timeouts when the database stops answering, and recovers", async () => {
    const url = new URL(await freshDatabase());
    const proxy = await startTcpProxy(Number(url.port));
    url.port = String(proxy.port);
    let ledger: RefundLedger | undefined;
    try {
      ledger = await PostgresRefundLedger.open(url.toString(), {
        connectTimeoutMs: 300,
        statementTimeoutMs: 300,
        lockTimeoutMs: 300,
      });
      await ledger.seed(DEMO_ORDERS);
      proxy.cut();
      for (const call of [() => ledger!.refund(command), () => ledger!.getOrder(command.orderId)]) {
        const started = Date.now();
        expect((await refusal(call(), LedgerError)).reason).toBe("LEDGER_UNAVAILABLE");
        // The client's read timeout is the statement timeout + 1 s.
        expect(Date.now() - started).toBeLessThan(5000);
      }
      proxy.restore();
      expect((await ledger.refund(command)).replayed).toBe(false);
    } finally {
      await ledger?.close();
      await proxy.close();
    }
  });

  it("refuses to start, without hanging, when the database cannot be reached", async () => {
    const proxy = await startTcpProxy(1);
    proxy.cut();
    const started = Date.now();
    try {
      await expect(
        PostgresRefundLedger.open(`postgres://loopguard:secret@127.0.0.1:${proxy.port}/billing`, {
          connectTimeoutMs: 300,
        }),
      ).rejects.toThrow(/timeout/i);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await proxy.close();
    }
  });
});
