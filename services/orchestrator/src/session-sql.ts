// SQL fragments both session stores build their schema and queries from, so SQLite and
// PostgreSQL agree on what "terminal" and "live" mean.
import { TERMINAL_STATES } from "./session-state.js";

/** `'a', 'b', …` for an IN list of known identifiers (never user input). */
export const sqlList = (values: readonly string[]): string => values.map((v) => `'${v}'`).join(", ");

export const TERMINAL_SQL = sqlList(TERMINAL_STATES);

// The live-session predicate, spelled as a conjunction of <> rather than NOT IN: SQLite then
// maintains the partial index over live sessions cheaply (with NOT IN, each UPDATE took ~0.7 ms
// instead of ~50 µs), and queries that repeat the predicate verbatim can use that index.
export const LIVE_SQL = TERMINAL_STATES.map((s) => `state <> '${s}'`).join(" AND ");
