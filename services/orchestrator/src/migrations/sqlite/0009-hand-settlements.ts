// Who settled a reservation by hand, and why (`pnpm settle-effect`): an operator's word on an
// effect whose outcome the session never learnt, kept on the reservation it settles.
import type { SqliteMigration } from "@loopguard/sql-store";

export const handSettlements: SqliteMigration = {
  name: "0009-hand-settlements",
  // Two nullable columns: earlier builds read and write the table as before.
  compatibility: "expand",
  up(db) {
    db.exec(`
      ALTER TABLE effect_reservations ADD COLUMN settled_by TEXT;
      ALTER TABLE effect_reservations ADD COLUMN settle_note TEXT;`);
  },
};
