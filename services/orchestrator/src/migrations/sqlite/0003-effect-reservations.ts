// Money held before it moves (see effect-reservations.ts): one row per irreversible effect, by its
// idempotency key, with the indexes its three totals are summed by.
import type { SqliteMigration } from "@loopguard/sql-store";

export const effectReservations: SqliteMigration = {
  name: "0003-effect-reservations",
  up(db) {
    db.exec(`
      CREATE TABLE effect_reservations (
        key         TEXT PRIMARY KEY,
        session_id  TEXT NOT NULL REFERENCES sessions (id),
        tool        TEXT NOT NULL,
        entity      TEXT NOT NULL,
        entity_id   TEXT NOT NULL,
        customer_id TEXT NOT NULL,
        currency    TEXT NOT NULL,
        amount      INTEGER NOT NULL CHECK (amount >= 0),
        status      TEXT NOT NULL CHECK (status = 'held' OR status = 'settled' OR status = 'released'),
        created_at  INTEGER NOT NULL,
        settled_at  INTEGER
      ) STRICT;
      CREATE INDEX effect_reservations_by_entity ON effect_reservations (entity, entity_id, status);
      CREATE INDEX effect_reservations_by_customer ON effect_reservations (customer_id, currency, created_at);
      CREATE INDEX effect_reservations_by_session ON effect_reservations (session_id);`);
  },
};
