// The session tables' migrations on SQLite, in the order they run; names are never changed once released.
import type { SqliteMigration } from "@loopguard/sql-store";
import { sessions } from "./0001-sessions.js";
import { sessionsByCreator } from "./0002-sessions-by-creator.js";
import { effectReservations } from "./0003-effect-reservations.js";
import { parkedSessions } from "./0004-parked-sessions.js";
import { stepsByTime } from "./0005-steps-by-time.js";
import { patrolRuns } from "./0006-patrol-runs.js";
import { approvalsByExpiry } from "./0007-approvals-by-expiry.js";
import { claimableSessions } from "./0008-claimable-sessions.js";
import { handSettlements } from "./0009-hand-settlements.js";

export { OPEN_SQL } from "./0001-sessions.js";
export const SQLITE_SESSION_MIGRATIONS: readonly SqliteMigration[] = [
  sessions,
  sessionsByCreator,
  effectReservations,
  parkedSessions,
  stepsByTime,
  patrolRuns,
  approvalsByExpiry,
  claimableSessions,
  handSettlements,
];
