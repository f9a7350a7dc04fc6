// Orders seeded on start so the reference refund task and the drills have something to act on.
// Ids are fixed so docs, tests and scripted sessions can name them; seeding never overwrites.
import { RefundReason } from "@loopguard/proto/gen/loopguard/billing/v1/billing_pb";
import type { SeedOrder } from "./ledger.js";

const day = (iso: string) => new Date(`${iso}T09:30:00.000Z`);

export const DEMO_ORDERS: readonly SeedOrder[] = [
  {
    orderId: "ord_DEMO00000001",
    customerId: "cust_demo_0001",
    state: "PAID",
    amountPaidCents: 12_999,
    currency: "USD",
    createdAt: day("2026-11-02"),
  },
  {
    orderId: "ord_DEMO00000002",
    customerId: "cust_demo_0002",
    state: "PAID",
    amountPaidCents: 450_000,
    currency: "USD",
    createdAt: day("2026-11-05"),
  },
  {
    orderId: "ord_DEMO00000003",
    customerId: "cust_demo_0003",
    state: "PENDING",
    amountPaidCents: 0,
    currency: "USD",
    createdAt: day("2026-11-20"),
  },
  {
    orderId: "ord_DEMO00000004",
    customerId: "cust_demo_0004",
    state: "CANCELLED",
    amountPaidCents: 0,
    currency: "USD",
    createdAt: day("2026-11-08"),
  },
  {
    orderId: "ord_DEMO00000005",
    customerId: "cust_demo_0005",
    state: "PAID",
    amountPaidCents: 8_000,
    currency: "USD",
    createdAt: day("2026-11-10"),
    refunds: [
      {
        refundId: "rf_DEMO000000000005",
        amountCents: 2_500,
        reason: RefundReason.DAMAGED,
        idempotencyKey: "demo-seed-ord-0005-refund-1",
        createdAt: day("2026-11-12"),
      },
    ],
  },
  {
    orderId: "ord_DEMO00000006",
    customerId: "cust_demo_0006",
    state: "REFUNDED",
    amountPaidCents: 2_999,
    currency: "USD",
    createdAt: day("2026-11-01"),
    refunds: [
      {
        refundId: "rf_DEMO000000000006",
        amountCents: 2_999,
        reason: RefundReason.NOT_DELIVERED,
        idempotencyKey: "demo-seed-ord-0006-refund-1",
        createdAt: day("2026-11-04"),
      },
    ],
  },
  {
    orderId: "ord_DEMO00000007",
    customerId: "cust_demo_0007",
    state: "PAID",
    amountPaidCents: 199,
    currency: "USD",
    createdAt: day("2026-11-15"),
  },
  {
    orderId: "ord_DEMO00000008",
    customerId: "cust_demo_0008",
    state: "PAID",
    amountPaidCents: 59_900,
    currency: "CNY",
    createdAt: day("2026-11-18"),
  },
  // A second and a third order of cust_demo_0001: the per-customer total across orders, and one in another currency.
  {
    orderId: "ord_DEMO00000009",
    customerId: "cust_demo_0001",
    state: "PAID",
    amountPaidCents: 250_000,
    currency: "USD",
    createdAt: day("2026-11-21"),
  },
  {
    orderId: "ord_DEMO00000010",
    customerId: "cust_demo_0001",
    state: "PAID",
    amountPaidCents: 300_000,
    currency: "CNY",
    createdAt: day("2026-11-22"),
  },
];
