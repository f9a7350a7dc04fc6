// Money held before it moves (see effect-reservations.ts): one row per irreversible effect, by its
// idempotency key, and the running sums of the three totals it counts in.
import type { PostgresMigration } from "@loopguard/sql-store";

export const effectReservations: PostgresMigration = {
  name: "0004-effect-reservations",
  compatibility: "expand",
  async up(db) {
    await db.query(`
      CREATE TABLE effect_reservations (
        key         text PRIMARY KEY,
        session_id  text NOT NULL REFERENCES sessions (id),
        tool        text NOT NULL,
        entity      text NOT NULL,
        entity_id   text NOT NULL,
        customer_id text NOT NULL,
        currency    text NOT NULL,
        amount      bigint NOT NULL CHECK (amount >= 0),
        status      text NOT NULL CHECK (status IN ('held', 'settled', 'released')),
        created_at  bigint NOT NULL,
        settled_at  bigint
      );
      CREATE INDEX effect_reservations_by_session ON effect_reservations (session_id);
      CREATE TABLE effect_totals (
        scope    text NOT NULL CHECK (scope IN ('entity', 'customer', 'session')),
        id       text NOT NULL,
        currency text NOT NULL,
        bucket   bigint NOT NULL,
        held     bigint NOT NULL,
        made     bigint NOT NULL,
        PRIMARY KEY (scope, id, currency, bucket)
      );`);
  },
};
