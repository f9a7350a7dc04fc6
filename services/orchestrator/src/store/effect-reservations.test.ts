import { describe, expect, it } from "vitest";
import { reservedTotals, totalsDelta } from "./effect-reservations.js";

describe("reservedTotals", () => {
  it("is the reserve delta of the row the reservation writes: held by its amount, nothing made", () => {
    const now = 1_700_000_000_000;
    const r = {
      key: "k1",
      sessionId: "ses_1",
      tool: "billing",
      entity: "order",
      entityId: "ord_1",
      customerId: "cus_1",
      currency: "CNY",
      amount: 1000,
    };
    const delta = reservedTotals(r, now);
    expect(delta).toMatchObject({
      entityKey: "order:ord_1",
      sessionId: "ses_1",
      customerId: "cus_1",
      held: 1000,
      made: 0,
    });
    expect(delta).toEqual(
      totalsDelta(
        {
          session_id: "ses_1",
          entity: "order",
          entity_id: "ord_1",
          customer_id: "cus_1",
          currency: "CNY",
          amount: 1000,
          created_at: now,
        },
        "reserve",
      ),
    );
  });
});
