// Money held before it moves (see effect-reservations.ts): one row per irreversible effect, by its
// idempotency key, and the running sums of the three totals it counts in.
import type { SqliteMigration } from "@loopguard/sql-store";

export const effectReservations: SqliteMigration = {
  name: "0003-effect-reservations",
  compatibility: "expand",
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
      CREATE INDEX effect_reservations_by_session ON effect_reservations (session_id);
      CREATE TABLE effect_totals (
        scope    TEXT NOT NULL CHECK (scope = 'entity' OR scope = 'customer' OR scope = 'session'),
        id       TEXT NOT NULL,
        currency TEXT NOT NULL,
        bucket   INTEGER NOT NULL,
        held     INTEGER NOT NULL,
        made     INTEGER NOT NULL,
        PRIMARY KEY (scope, id, currency, bucket)
      ) STRICT, WITHOUT ROWID;`);
  },
};
