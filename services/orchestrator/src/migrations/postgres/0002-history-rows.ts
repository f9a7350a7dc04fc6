// context.history as one row per item, as on SQLite: a step appends its items instead of
// rewriting a context that grows with every step. Existing sessions' histories move out of
// sessions.context into session_history; sessions.history_len is NULL when a context has none.
import type { PostgresMigration } from "@loopguard/sql-store";

export const historyRows: PostgresMigration = {
  name: "0002-history-rows",
  // Moves histories out of sessions.context: a build that reads them there sees every session without its history.
  compatibility: "contract",
  async up(db) {
    await db.query(`
      ALTER TABLE sessions ADD COLUMN history_len integer CHECK (history_len >= 0);
      CREATE TABLE session_history (
        session_id text NOT NULL REFERENCES sessions (id),
        seq integer NOT NULL CHECK (seq >= 0),
        item jsonb NOT NULL,
        PRIMARY KEY (session_id, seq)
      );
      INSERT INTO session_history (session_id, seq, item)
        SELECT s.id, h.ord - 1, h.item
        FROM sessions s, jsonb_array_elements(s.context -> 'history') WITH ORDINALITY AS h (item, ord)
        WHERE jsonb_typeof(s.context -> 'history') = 'array';
      UPDATE sessions SET history_len = jsonb_array_length(context -> 'history'), context = context - 'history'
        WHERE jsonb_typeof(context -> 'history') = 'array';`);
  },
};
