// The billing process is SIGKILLed in the middle of a burst of refunds, then restarted on the
// same data dir: no refund is half-written, none acknowledged is lost, no order is over-refunded,
// and retrying every unanswered key once creates no duplicate.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import type { ServiceProcess } from "@loopguard/test-kit";
import { BillingService, RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import { createRawClient, type RawClient } from "@loopguard/tool-sdk";
import { spawnTool, testToken, withBoundTokens } from "@loopguard/tool-sdk/testing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { NO_ORDER_REACHES } from "./billing-fixture.js";

const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const BURST = 200;
const CONCURRENCY = 16;
const KILL_AFTER_ACKS = 60;
const ORDERS = ["ord_DEMO00000001", "ord_DEMO00000002", "ord_DEMO00000005", "ord_DEMO00000008"];

interface BurstRequest {
  readonly orderId: string;
  readonly amountCents: bigint;
  readonly reason: RefundReason;
  readonly idempotencyKey: string;
  readonly maxRefundedTotalCents: bigint;
}

// Amounts of 1..25 cents, 50 per order: every request fits what its order has left to refund.
const burst: BurstRequest[] = Array.from({ length: BURST }, (_, i) => ({
  orderId: ORDERS[i % ORDERS.length]!,
  amountCents: BigInt(1 + (i % 25)),
  reason: RefundReason.CUSTOMER_REQUEST,
  idempotencyKey: `crash-burst-key-${String(i).padStart(4, "0")}`,
  maxRefundedTotalCents: NO_ORDER_REACHES,
}));

let dataDir: string;
const processes: ServiceProcess[] = [];
const clients: RawClient<typeof BillingService>[] = [];

function start(): Promise<ServiceProcess> {
  return spawnTool(MAIN, { BILLING_PORT: "0", BILLING_METRICS_PORT: "0", LOOPGUARD_DATA_DIR: dataDir }).then((p) => {
    processes.push(p);
    return p;
  });
}

async function clientOf(p: ServiceProcess): Promise<RawClient<typeof BillingService>> {
  const token = await testToken({ subject: "crash-test", scopes: ["billing:refund", "billing:read"] });
  const client = withBoundTokens(BillingService, createRawClient(BillingService, p.address, { token }));
  clients.push(client);
  return client;
}

beforeAll(() => {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run \`pnpm build\` first`);
  dataDir = mkdtempSync(join(tmpdir(), "billing-crash-"));
});

afterAll(async () => {
  for (const c of clients) c.close();
  for (const p of processes) {
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
    await p.exited;
  }
  rmSync(dataDir, { recursive: true, force: true });
});

it("keeps every acknowledged refund, writes none by halves and duplicates none after a SIGKILL mid-burst", async () => {
  const first = await start();
  const client = await clientOf(first);
  const acknowledged = new Map<string, string>();
  let next = 0;

  // The kill lands a random instant after the KILL_AFTER_ACKS-th answer while the burst goes
  // on, so it finds the server anywhere: verifying, committing, answering. Calls after it fail.
  const worker = async () => {
    while (next < burst.length) {
      const request = burst[next++]!;
      try {
        const response = await client.refund(request, { deadline: 5000 });
        acknowledged.set(request.idempotencyKey, response.refund!.refundId);
        if (acknowledged.size === KILL_AFTER_ACKS) setTimeout(() => first.child.kill("SIGKILL"), Math.random() * 3);
      } catch {
        // Cut off by the kill; retried after the restart.
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  expect(await first.exited).toBe("SIGKILL");
  const unacknowledged = burst.filter((r) => !acknowledged.has(r.idempotencyKey));
  expect(acknowledged.size).toBeGreaterThanOrEqual(KILL_AFTER_ACKS);
  expect(unacknowledged.length).toBeGreaterThan(0);

  const second = await start();
  const db = new Database(join(dataDir, "billing.db"), { readonly: true });
  try {
    const totals = () =>
      db
        .prepare(
          `SELECT o.order_id, o.amount_paid_cents AS paid, o.amount_refunded_cents AS refunded,
                  COALESCE((SELECT SUM(amount_cents) FROM refunds r WHERE r.order_id = o.order_id), 0) AS sum
             FROM orders o`,
        )
        .all() as { order_id: string; paid: number; refunded: number; sum: number }[];
    const rowOf = (key: string) =>
      db.prepare("SELECT refund_id, order_id, amount_cents FROM refunds WHERE idempotency_key = ?").all(key) as {
        refund_id: string;
        order_id: string;
        amount_cents: number;
      }[];

    for (const order of totals()) {
      expect(order.refunded, `${order.order_id}: refunded total equals the sum of its refund rows`).toBe(order.sum);
      expect(order.sum).toBeLessThanOrEqual(order.paid);
    }
    for (const request of burst.filter((r) => acknowledged.has(r.idempotencyKey))) {
      expect(rowOf(request.idempotencyKey)).toEqual([
        {
          refund_id: acknowledged.get(request.idempotencyKey),
          order_id: request.orderId,
          amount_cents: Number(request.amountCents),
        },
      ]);
    }

    // Calls cut off by the kill either committed (their answer was lost) or left nothing.
    const committedUnanswered = new Map<string, string>();
    for (const request of unacknowledged) {
      const rows = rowOf(request.idempotencyKey);
      expect(rows.length).toBeLessThanOrEqual(1);
      if (rows[0]) committedUnanswered.set(request.idempotencyKey, rows[0].refund_id);
    }

    const retryClient = await clientOf(second);
    const queue = [...unacknowledged];
    const retried = new Map<string, { refundId: string; replayed: boolean }>();
    const retryWorker = async () => {
      for (let request = queue.shift(); request; request = queue.shift()) {
        const response = await retryClient.refund(request);
        retried.set(request.idempotencyKey, { refundId: response.refund!.refundId, replayed: response.replayed });
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, retryWorker));
    for (const request of unacknowledged) {
      const committed = committedUnanswered.get(request.idempotencyKey);
      const answer = retried.get(request.idempotencyKey);
      expect(answer).toEqual(
        committed
          ? { refundId: committed, replayed: true }
          : { refundId: expect.stringMatching(/^rf_/), replayed: false },
      );
    }

    for (const request of burst) expect(rowOf(request.idempotencyKey), request.idempotencyKey).toHaveLength(1);
    for (const order of totals()) {
      expect(order.refunded).toBe(order.sum);
      expect(order.sum).toBeLessThanOrEqual(order.paid);
    }
    const burstTotal = burst.reduce((sum, r) => sum + Number(r.amountCents), 0);
    const burstRows = db
      .prepare(
        "SELECT COUNT(*) AS n, SUM(amount_cents) AS total FROM refunds WHERE idempotency_key LIKE 'crash-burst-key-%'",
      )
      .get();
    expect(burstRows).toEqual({ n: BURST, total: burstTotal });

    // The API agrees with the file.
    for (const orderId of ORDERS) {
      const { order } = await retryClient.getOrder({ orderId });
      const { refunds } = await retryClient.listRefunds({ orderId });
      const stored = totals().find((t) => t.order_id === orderId)!;
      expect(order?.amountRefundedCents).toBe(BigInt(stored.refunded));
      expect(refunds.reduce((sum, r) => sum + r.amountCents, 0n)).toBe(BigInt(stored.sum));
    }
  } finally {
    db.close();
  }
  second.child.kill("SIGTERM");
  expect(await second.exited).toBe(0);
});
