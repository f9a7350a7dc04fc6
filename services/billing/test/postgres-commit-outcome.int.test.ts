// A refund's COMMIT reaches PostgreSQL and its answer is lost (the link to the database goes
// silent right after it): the refund may have been made. Billing must not answer that as a
// refusal ("nothing was written") but as OUTCOME_UNKNOWN, which the same idempotency key settles.
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { refusal } from "@loopguard/test-kit";
import { startTcpProxy } from "@loopguard/sql-store/testing";
import { usePostgres } from "@loopguard/sql-store/testing/vitest";
import { CallError, createRawClient, status } from "@loopguard/tool-sdk";
import { boundToken, startTestTool } from "@loopguard/tool-sdk/testing";
import pg from "pg";
import { expect, it } from "vitest";
import { DEMO_ORDERS } from "../src/demo-orders.js";
import { LedgerError } from "../src/ledger.js";
import { PostgresRefundLedger } from "../src/postgres-ledger.js";
import { build } from "../src/server.js";

const { skip, freshDatabase } = usePostgres("billing-commit");

/** A seeded database, and a ledger that reaches it through a proxy the test can cut. */
async function ledgerBehindProxy() {
  const url = await freshDatabase();
  const direct = await PostgresRefundLedger.open(url);
  await direct.seed(DEMO_ORDERS);
  const proxy = await startTcpProxy(Number(new URL(url).port));
  const proxied = new URL(url);
  proxied.hostname = "127.0.0.1";
  proxied.port = String(proxy.port);
  const ledger = await PostgresRefundLedger.open(proxied.toString());
  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  const rows = async (key: string) =>
    (await raw.query("SELECT amount_cents::int FROM refunds WHERE idempotency_key = $1", [key])).rows;
  const close = async () => {
    await raw.end();
    await ledger.close().catch(() => undefined);
    await direct.close();
    await proxy.close();
  };
  return { direct, ledger, proxy, rows, close };
}

const command = (idempotencyKey: string, amountCents: number) => ({
  orderId: "ord_DEMO00000002",
  amountCents,
  reason: RefundReason.DAMAGED,
  idempotencyKey,
  maxRefundedTotalCents: 450_000,
  at: new Date(),
});

it.skipIf(skip)(
  "a refund whose COMMIT went out unanswered is OUTCOME_UNKNOWN, and the same key then replays it",
  async () => {
    const { direct, ledger, proxy, rows, close } = await ledgerBehindProxy();
    try {
      proxy.cutAfter("COMMIT");
      const error = await refusal(ledger.refund(command("commit-unanswered-0001", 1234)), LedgerError);
      expect(error.reason).toBe("OUTCOME_UNKNOWN");
      expect(await rows("commit-unanswered-0001")).toEqual([{ amount_cents: 1234 }]);
      const again = await direct.refund(command("commit-unanswered-0001", 1234));
      expect([again.replayed, await rows("commit-unanswered-0001")]).toEqual([true, [{ amount_cents: 1234 }]]);
    } finally {
      await close();
    }
  },
);

it.skipIf(skip)(
  "over gRPC it is UNAVAILABLE OUTCOME_UNKNOWN, not the contract's LEDGER_UNAVAILABLE refusal",
  async () => {
    const { ledger, proxy, rows, close } = await ledgerBehindProxy();
    const tool = await startTestTool(build({ ledger, clock: { now: () => new Date() } }), { shutdownGraceMs: 500 });
    const client = createRawClient(BillingService, tool.address);
    const request = {
      orderId: "ord_DEMO00000002",
      amountCents: 700n,
      reason: RefundReason.DAMAGED,
      idempotencyKey: "commit-unanswered-grpc-01",
      maxRefundedTotalCents: 450_000n,
    };
    try {
      proxy.cutAfter("COMMIT");
      const token = await boundToken(BillingService, "Refund", request);
      const error = await refusal(client.refund(request, { token, deadline: 20_000 }), CallError);
      expect([status[error.code], error.reason]).toEqual(["UNAVAILABLE", "OUTCOME_UNKNOWN"]);
      expect(await rows(request.idempotencyKey)).toEqual([{ amount_cents: 700 }]);
    } finally {
      client.close();
      await tool.close().catch(() => undefined);
      await close();
    }
  },
);
