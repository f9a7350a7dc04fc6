// Who settled a reservation by hand, and why (`pnpm settle-effect`): an operator's word on an
// effect whose outcome the session never learnt, kept on the reservation it settles.
import type { PostgresMigration } from "@loopguard/sql-store";

export const handSettlements: PostgresMigration = {
  name: "0011-hand-settlements",
  // Two nullable columns: earlier builds read and write the table as before.
  compatibility: "expand",
  async up(db) {
    await db.query(`
      ALTER TABLE effect_reservations ADD COLUMN IF NOT EXISTS settled_by text;
      ALTER TABLE effect_reservations ADD COLUMN IF NOT EXISTS settle_note text;`);
  },
};
