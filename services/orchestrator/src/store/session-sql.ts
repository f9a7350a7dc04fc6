// SQL fragments the PostgreSQL session store builds its schema and queries from. (SQLite spells
// them its own way, for its planner: see sqlite-session-store.ts.)
import { TERMINAL_STATES } from "../session/session-state.js";

/** `'a', 'b', …` for an IN list of known identifiers (never user input). */
export const sqlList = (values: readonly string[]): string => values.map((v) => `'${v}'`).join(", ");

export const TERMINAL_SQL = sqlList(TERMINAL_STATES);

// The live-session predicate, spelled as a conjunction of <> rather than NOT IN, as the partial
// index over live sessions is declared; queries that repeat it verbatim can use that index.
export const LIVE_SQL = TERMINAL_STATES.map((s) => `state <> '${s}'`).join(" AND ");
