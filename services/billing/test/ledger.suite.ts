// The one behavioural suite every RefundLedger must pass; each backend's test file only says how
// to open a fresh ledger (demo orders seeded) and how to look at its rows behind its back.
import { refusal } from "@loopguard/test-kit";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DEMO_ORDERS } from "../src/demo-orders.js";
import type { LedgerOptions } from "../src/open-ledger.js";
import { LedgerError, type RefundCommand, type RefundLedger } from "../src/ledger.js";

export interface LedgerHarness {
  readonly ledger: RefundLedger;
  /** Another ledger on the same database, as a second replica or process would open it. */
  openAnother(options?: LedgerOptions): Promise<RefundLedger>;
  /** The order's refund rows as stored, oldest first. */
  refundRows(orderId: string): Promise<{ amount_cents: number; idempotency_key: string }[]>;
  /**
   * Takes, from a connection of its own, the lock a refund of `orderId` has to wait for, and
   * resolves with the function that releases it.
   */
  holdLock(orderId: string): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export type LedgerFactory = () => Promise<LedgerHarness>;

const at = new Date("2026-11-29T12:00:00.000Z");
const DAMAGED = 1;
const WRONG_ITEM = 3;

export function describeRefundLedger(name: string, factory: LedgerFactory, options: { skip?: string } = {}): void {
  const suite = options.skip ? describe.skip : describe;
  suite(`RefundLedger contract: ${name}`, () => {
    let h: LedgerHarness;
    let ledger: RefundLedger;
    const extra: RefundLedger[] = [];

    beforeEach(async () => {
      h = await factory();
      ledger = h.ledger;
    });
    afterEach(async () => {
      for (const other of extra.splice(0)) await other.close();
      await h.close();
    });

    const another = async (ledgerOptions?: LedgerOptions): Promise<RefundLedger> => {
      const other = await h.openAnother(ledgerOptions);
      extra.push(other);
      return other;
    };
    const refund = (l: RefundLedger, command: Partial<RefundCommand> & { idempotencyKey: string }) =>
      l.refund({
        orderId: "ord_DEMO00000001",
        amountCents: 100,
        reason: DAMAGED,
        maxRefundedTotalCents: 0,
        at,
        ...command,
      });

    it("seeds the demo orders once, deriving refunded totals from their refunds", async () => {
      await ledger.seed(DEMO_ORDERS);
      expect(await ledger.getOrder("ord_DEMO00000005")).toMatchObject({
        state: "PAID",
        amountPaidCents: 8000,
        amountRefundedCents: 2500,
        refundableCents: 5500,
        version: 2,
      });
      expect(await ledger.getOrder("ord_DEMO00000006")).toMatchObject({
        state: "REFUNDED",
        amountRefundedCents: 2999,
        refundableCents: 0,
      });
      expect(await ledger.getOrder("ord_DEMO00000003")).toMatchObject({ state: "PENDING", refundableCents: 0 });
      expect(await h.refundRows("ord_DEMO00000005")).toHaveLength(1);
    });

    it("seeds once when replicas seed at the same moment", async () => {
      const others = await Promise.all([another(), another(), another()]);
      await Promise.all([ledger, ...others].map((l) => l.seed(DEMO_ORDERS)));
      expect(await h.refundRows("ord_DEMO00000005")).toEqual([
        { amount_cents: 2500, idempotency_key: "demo-seed-ord-0005-refund-1" },
      ]);
      expect(await ledger.getOrder("ord_DEMO00000005")).toMatchObject({ amountRefundedCents: 2500, version: 2 });
    });

    it("does not overwrite an order that changed since it was seeded", async () => {
      await refund(ledger, { amountCents: 999, idempotencyKey: "unit-key-000000001" });
      await ledger.seed(DEMO_ORDERS);
      expect(await ledger.getOrder("ord_DEMO00000001")).toMatchObject({ amountRefundedCents: 999, version: 2 });
    });

    it("records a refund and updates the order's totals and version", async () => {
      const outcome = await refund(ledger, { amountCents: 2999, idempotencyKey: "unit-key-000000001" });
      expect(outcome.replayed).toBe(false);
      expect(outcome.refund.refundId).toMatch(/^rf_[A-Za-z0-9]{16}$/);
      expect(outcome.refund).toMatchObject({
        orderId: "ord_DEMO00000001",
        amountCents: 2999,
        reason: DAMAGED,
        createdAt: at,
      });
      expect(outcome.orderRefundableCents).toBe(10_000);
      expect(await ledger.getOrder("ord_DEMO00000001")).toMatchObject({
        state: "PAID",
        amountRefundedCents: 2999,
        refundableCents: 10_000,
        version: 2,
      });
    });

    it("a dry run decides as a real refund does and writes nothing: the order, its refunds and the key stay as they were", async () => {
      const before = await ledger.getOrder("ord_DEMO00000001");
      const dry = await refund(ledger, { amountCents: 2999, idempotencyKey: "unit-key-dry-00001", dryRun: true });
      expect(dry).toMatchObject({ dryRun: true, replayed: false, orderRefundableCents: 10_000 });
      expect(dry.refund.refundId).toMatch(/^rf_dryrun[A-Za-z0-9]{10}$/);
      expect(await ledger.getOrder("ord_DEMO00000001")).toEqual(before);
      expect(await h.refundRows("ord_DEMO00000001")).toEqual([]);
      expect(await ledger.listRefunds("ord_DEMO00000001")).toEqual({ refunds: [] });
      // The key was not used: the real refund with it is made, not replayed.
      const real = await refund(ledger, { amountCents: 2999, idempotencyKey: "unit-key-dry-00001" });
      expect(real).toMatchObject({ replayed: false, orderRefundableCents: 10_000 });
      expect(real.dryRun).toBeUndefined();
      expect(await h.refundRows("ord_DEMO00000001")).toHaveLength(1);
    });

    it("a dry run of a key already used answers as a dry run of the replay: dry_run set, an rf_dryrun id, nothing written", async () => {
      const made = await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 250,
        idempotencyKey: "unit-key-made-0001",
      });
      const rows = await h.refundRows("ord_DEMO00000002");
      const dry = await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 250,
        idempotencyKey: "unit-key-made-0001",
        dryRun: true,
      });
      expect(dry).toMatchObject({ dryRun: true, replayed: true, orderRefundableCents: made.orderRefundableCents });
      expect(dry.refund.refundId).toMatch(/^rf_dryrun[A-Za-z0-9]{10}$/);
      expect(dry.refund.refundId).not.toBe(made.refund.refundId);
      expect(await h.refundRows("ord_DEMO00000002")).toEqual(rows);
    });

    it("a dry run is refused exactly as the real refund would be, and writes nothing", async () => {
      await refund(ledger, { orderId: "ord_DEMO00000002", amountCents: 100, idempotencyKey: "unit-key-used-0001" });
      const cases: (Partial<RefundCommand> & { idempotencyKey: string })[] = [
        { orderId: "ord_DEMO00000006", amountCents: 1, idempotencyKey: "unit-key-case-0001" },
        { orderId: "ord_DEMO00000003", amountCents: 100, idempotencyKey: "unit-key-case-0002" },
        { orderId: "ord_DEMO00000004", amountCents: 100, idempotencyKey: "unit-key-case-0003" },
        { orderId: "ord_DEMO00000005", amountCents: 5501, idempotencyKey: "unit-key-case-0004" },
        { orderId: "ord_NOSUCHORDER1", amountCents: 100, idempotencyKey: "unit-key-case-0005" },
        {
          orderId: "ord_DEMO00000001",
          amountCents: 100,
          maxRefundedTotalCents: 99,
          idempotencyKey: "unit-key-case-0006",
        },
        { orderId: "ord_DEMO00000002", amountCents: 200, idempotencyKey: "unit-key-used-0001" },
      ];
      const orders = async () =>
        Promise.all(
          ["ord_DEMO00000001", "ord_DEMO00000002", "ord_DEMO00000005", "ord_DEMO00000006"].map((id) =>
            ledger.getOrder(id),
          ),
        );
      const before = await orders();
      for (const command of cases) {
        const dry = await refusal(refund(ledger, { ...command, dryRun: true }), LedgerError);
        const real = await refusal(refund(ledger, command), LedgerError);
        expect([dry.reason, dry.message]).toEqual([real.reason, real.message]);
      }
      expect(await orders()).toEqual(before);
    });

    it("marks the order REFUNDED when the last cent is refunded", async () => {
      await refund(ledger, { orderId: "ord_DEMO00000007", amountCents: 199, idempotencyKey: "unit-key-000000001" });
      expect(await ledger.getOrder("ord_DEMO00000007")).toMatchObject({
        state: "REFUNDED",
        refundableCents: 0,
        amountRefundedCents: 199,
      });
      const error = await refusal(
        refund(ledger, { orderId: "ord_DEMO00000007", amountCents: 1, idempotencyKey: "unit-key-000000002" }),
        LedgerError,
      );
      expect(error.reason).toBe("ORDER_NOT_REFUNDABLE");
    });

    it("replays the first outcome for the same key and parameters without writing", async () => {
      const command = {
        orderId: "ord_DEMO00000008",
        amountCents: 100,
        reason: WRONG_ITEM,
        idempotencyKey: "unit-key-000000001",
      };
      const first = await refund(ledger, command);
      await refund(ledger, { ...command, idempotencyKey: "unit-key-000000002" });
      const again = await ledger.refund({ ...command, maxRefundedTotalCents: 0, at: new Date(at.getTime() + 60_000) });
      expect(again).toEqual({ ...first, replayed: true });
      expect(await h.refundRows("ord_DEMO00000008")).toHaveLength(2);
      expect(await ledger.getOrder("ord_DEMO00000008")).toMatchObject({ amountRefundedCents: 200, version: 3 });
    });

    it.each([
      ["another amount", { amountCents: 101 }],
      ["another reason", { reason: DAMAGED }],
      ["another order", { orderId: "ord_DEMO00000001" }],
    ])("refuses a key reused with %s and writes nothing", async (_, change) => {
      const command = {
        orderId: "ord_DEMO00000008",
        amountCents: 100,
        reason: WRONG_ITEM,
        idempotencyKey: "unit-key-000000001",
      };
      await refund(ledger, command);
      expect((await refusal(refund(ledger, { ...command, ...change }), LedgerError)).reason).toBe(
        "IDEMPOTENCY_KEY_REUSED",
      );
      expect(await h.refundRows("ord_DEMO00000008")).toHaveLength(1);
      expect(await h.refundRows("ord_DEMO00000001")).toHaveLength(0);
    });

    it("refuses a refund above the caller's bound with BOUND_EXCEEDED and writes nothing", async () => {
      await refund(ledger, { orderId: "ord_DEMO00000002", amountCents: 45_000, idempotencyKey: "unit-key-000000001" });
      const error = await refusal(
        refund(ledger, {
          orderId: "ord_DEMO00000002",
          amountCents: 45_000,
          maxRefundedTotalCents: 50_000,
          idempotencyKey: "unit-key-000000002",
        }),
        LedgerError,
      );
      expect(error.reason).toBe("BOUND_EXCEEDED");
      expect(await h.refundRows("ord_DEMO00000002")).toHaveLength(1);
      expect(await ledger.getOrder("ord_DEMO00000002")).toMatchObject({ amountRefundedCents: 45_000, version: 2 });
    });

    it("lets concurrent refunds within the bound all pass, and refuses exactly those that would pass it", async () => {
      const others = await Promise.all([another(), another()]);
      const ledgers = [ledger, ...others];
      const outcomes = await Promise.allSettled(
        Array.from({ length: 12 }, (_, i) =>
          refund(ledgers[i % ledgers.length]!, {
            orderId: "ord_DEMO00000002",
            amountCents: 10_000,
            maxRefundedTotalCents: 50_000,
            idempotencyKey: `unit-bound-key-${String(i).padStart(4, "0")}`,
          }),
        ),
      );
      const made = outcomes.filter((o) => o.status === "fulfilled");
      const refused = outcomes.flatMap((o) => (o.status === "rejected" ? [(o.reason as LedgerError).reason] : []));
      expect(made).toHaveLength(5);
      expect(refused).toEqual(Array(7).fill("BOUND_EXCEEDED"));
      expect(await ledger.getOrder("ord_DEMO00000002")).toMatchObject({ amountRefundedCents: 50_000 });
    });

    it("replays a refund already made whatever bound the repeat carries", async () => {
      const first = await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 45_000,
        maxRefundedTotalCents: 50_000,
        idempotencyKey: "unit-key-000000001",
      });
      const again = await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 45_000,
        maxRefundedTotalCents: 1,
        idempotencyKey: "unit-key-000000001",
      });
      expect(again).toEqual({ ...first, replayed: true });
    });

    it("records who made a break-glass refund and why, with the refund and once, and nothing for other refunds", async () => {
      const use = { subject: "alice", keyId: "glass-alice", reason: "INC-42: refund stuck behind an outage" };
      const made = await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 700,
        idempotencyKey: "unit-glass-00000001",
        breakGlass: use,
      });
      await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 700,
        idempotencyKey: "unit-glass-00000001",
        breakGlass: use,
      });
      await refund(ledger, {
        orderId: "ord_DEMO00000002",
        amountCents: 800,
        maxRefundedTotalCents: 50_000,
        idempotencyKey: "unit-host-000000001",
      });
      expect(await ledger.breakGlassRefunds()).toEqual([
        {
          refund_id: made.refund.refundId,
          order_id: "ord_DEMO00000002",
          amount_cents: 700,
          subject: "alice",
          key_id: "glass-alice",
          reason: use.reason,
          at: at.getTime(),
        },
      ]);
    });

    it("refuses an unknown order", async () => {
      expect(
        (
          await refusal(
            refund(ledger, { orderId: "ord_UNKNOWN00001", amountCents: 1, idempotencyKey: "unit-key-000000001" }),
            LedgerError,
          )
        ).reason,
      ).toBe("ORDER_NOT_FOUND");
      expect(await ledger.getOrder("ord_UNKNOWN00001")).toBeUndefined();
      expect(await ledger.listRefunds("ord_UNKNOWN00001")).toBeUndefined();
      expect(await ledger.listRefunds("ord_UNKNOWN00001", { after: 1, size: 1 })).toBeUndefined();
    });

    it.each(["ord_DEMO00000003", "ord_DEMO00000004", "ord_DEMO00000006"])(
      "refuses to refund %s, which is not paid",
      async (orderId) => {
        const before = await ledger.getOrder(orderId);
        expect(
          (
            await refusal(
              refund(ledger, { orderId, amountCents: 1, idempotencyKey: "unit-key-000000001" }),
              LedgerError,
            )
          ).reason,
        ).toBe("ORDER_NOT_REFUNDABLE");
        expect(await ledger.getOrder(orderId)).toEqual(before);
      },
    );

    it("refuses more than is still refundable and leaves the order as it was", async () => {
      const before = await ledger.getOrder("ord_DEMO00000005");
      const error = await refusal(
        refund(ledger, { orderId: "ord_DEMO00000005", amountCents: 5501, idempotencyKey: "unit-key-000000001" }),
        LedgerError,
      );
      expect(error.reason).toBe("ORDER_NOT_REFUNDABLE");
      expect(await ledger.getOrder("ord_DEMO00000005")).toEqual(before);
      expect(await h.refundRows("ord_DEMO00000005")).toHaveLength(1);
      // The refused key stays free for a refund that fits.
      expect(
        (await refund(ledger, { orderId: "ord_DEMO00000005", amountCents: 5500, idempotencyKey: "unit-key-000000001" }))
          .replayed,
      ).toBe(false);
    });

    it("lists an order's refunds oldest first", async () => {
      const first = await refund(ledger, {
        orderId: "ord_DEMO00000005",
        amountCents: 100,
        idempotencyKey: "unit-key-000000001",
      });
      const second = await refund(ledger, {
        orderId: "ord_DEMO00000005",
        amountCents: 200,
        reason: WRONG_ITEM,
        idempotencyKey: "unit-key-000000002",
      });
      expect((await ledger.listRefunds("ord_DEMO00000005"))?.refunds.map((r) => r.refundId)).toEqual([
        "rf_DEMO000000000005",
        first.refund.refundId,
        second.refund.refundId,
      ]);
      expect(await ledger.listRefunds("ord_DEMO00000001")).toEqual({ refunds: [] });
    });

    /** Every page of the order's refund ids, `size` at a time, and how many pages it took. */
    const allPages = async (orderId: string, size: number, between?: () => Promise<unknown>) => {
      const ids: string[] = [];
      let after: number | undefined;
      let pages = 0;
      do {
        const page = await ledger.listRefunds(orderId, { size, ...(after === undefined ? {} : { after }) });
        if (!page) throw new Error(`no order ${orderId}`);
        pages += 1;
        ids.push(...page.refunds.map((r) => r.refundId));
        after = page.next;
        if (pages === 1) await between?.();
      } while (after !== undefined);
      return { ids, pages };
    };

    it("pages through an order's refunds: every refund once, the last page without a next", async () => {
      const made: string[] = [];
      for (let i = 1; i <= 5; i++)
        made.push((await refund(ledger, { amountCents: i, idempotencyKey: `unit-page-key-0000${i}` })).refund.refundId);
      expect(await allPages("ord_DEMO00000001", 2)).toEqual({ ids: made, pages: 3 });
      // A page that ends on the last refund says there is no more, rather than leaving an empty page.
      expect(await allPages("ord_DEMO00000001", 5)).toEqual({ ids: made, pages: 1 });
      expect(await allPages("ord_DEMO00000001", 1)).toEqual({ ids: made, pages: 5 });
      // Other orders' refunds never come into the pages.
      expect((await ledger.listRefunds("ord_DEMO00000002", { size: 2 }))?.refunds).toEqual([]);
    });

    it("a refund made while a reader pages comes on a later page, even when billing's clock stepped back", async () => {
      for (let i = 1; i <= 3; i++) await refund(ledger, { amountCents: i, idempotencyKey: `unit-page-key-0000${i}` });
      let late = "";
      const earlier = new Date(at.getTime() - 3_600_000);
      const { ids } = await allPages("ord_DEMO00000001", 2, async () => {
        late = (await refund(ledger, { amountCents: 7, idempotencyKey: "unit-page-key-late1", at: earlier })).refund
          .refundId;
      });
      expect(ids).toHaveLength(4);
      expect(new Set(ids).size).toBe(4);
      expect(ids.at(-1)).toBe(late);
    });

    it("replays on another replica what one replica refunded", async () => {
      const other = await another();
      const command = { orderId: "ord_DEMO00000002", amountCents: 5000, idempotencyKey: "unit-key-000000001" };
      const first = await refund(ledger, command);
      expect(await refund(other, command)).toEqual({ ...first, replayed: true });
      expect(await h.refundRows("ord_DEMO00000002")).toHaveLength(1);
    });

    it("executes 50 concurrent calls with one key, spread over two replicas, once", async () => {
      const other = await another();
      const command = { orderId: "ord_DEMO00000002", amountCents: 5000, idempotencyKey: "unit-key-000000001" };
      const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => refund(i % 2 ? other : ledger, command)));
      expect(new Set(outcomes.map((o) => o.refund.refundId)).size).toBe(1);
      expect(outcomes.filter((o) => !o.replayed)).toHaveLength(1);
      expect(await h.refundRows("ord_DEMO00000002")).toHaveLength(1);
      expect(await ledger.getOrder("ord_DEMO00000002")).toMatchObject({ amountRefundedCents: 5000, version: 2 });
    });

    it("never refunds more than was paid under 30 concurrent refunds of one order with distinct keys", async () => {
      const other = await another();
      const results = await Promise.allSettled(
        Array.from({ length: 30 }, (_, i) =>
          refund(i % 2 ? other : ledger, {
            orderId: "ord_DEMO00000007",
            amountCents: 10,
            idempotencyKey: `unit-key-${String(i).padStart(9, "0")}`,
          }),
        ),
      );
      const refused = results.filter((r) => r.status === "rejected").map((r) => (r.reason as LedgerError).reason);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(19);
      expect(refused).toEqual(Array(11).fill("ORDER_NOT_REFUNDABLE"));
      expect(await ledger.getOrder("ord_DEMO00000007")).toMatchObject({
        state: "PAID",
        amountRefundedCents: 190,
        refundableCents: 9,
        version: 20,
      });
      expect(await h.refundRows("ord_DEMO00000007")).toHaveLength(19);
    });

    it("lets one of two concurrent uses of a key for different orders through and refuses the other", async () => {
      const other = await another();
      const results = await Promise.allSettled([
        refund(ledger, { orderId: "ord_DEMO00000001", idempotencyKey: "unit-key-000000001" }),
        refund(other, { orderId: "ord_DEMO00000008", idempotencyKey: "unit-key-000000001" }),
      ]);
      expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
      const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
      expect((refused.reason as LedgerError).reason).toBe("IDEMPOTENCY_KEY_REUSED");
      expect([...(await h.refundRows("ord_DEMO00000001")), ...(await h.refundRows("ord_DEMO00000008"))]).toHaveLength(
        1,
      );
    });

    it("reports LEDGER_UNAVAILABLE when another connection holds the lock past the lock timeout, and writes nothing", async () => {
      const impatient = await another({ lockTimeoutMs: 50 });
      const release = await h.holdLock("ord_DEMO00000002");
      let error: LedgerError;
      try {
        error = await refusal(
          refund(impatient, { orderId: "ord_DEMO00000002", amountCents: 1, idempotencyKey: "unit-key-000000001" }),
          LedgerError,
        );
      } finally {
        await release();
      }
      expect(error.reason).toBe("LEDGER_UNAVAILABLE");
      expect(await h.refundRows("ord_DEMO00000002")).toHaveLength(0);
      expect(
        (await refund(impatient, { orderId: "ord_DEMO00000002", amountCents: 1, idempotencyKey: "unit-key-000000001" }))
          .replayed,
      ).toBe(false);
    });
  });
}
