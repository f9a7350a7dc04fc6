// The session tables' migrations on PostgreSQL, in the order they run; names are never changed once released.
import type { PostgresMigration } from "@loopguard/sql-store";
import { sessions } from "./0001-sessions.js";
import { historyRows } from "./0002-history-rows.js";
import { sessionsByCreator } from "./0003-sessions-by-creator.js";
import { effectReservations } from "./0004-effect-reservations.js";
import { parkedSessions } from "./0005-parked-sessions.js";
import { stepsByTime } from "./0006-steps-by-time.js";
import { patrolRuns } from "./0007-patrol-runs.js";
import { approvalsByExpiry } from "./0008-approvals-by-expiry.js";
import { claimableSessions } from "./0009-claimable-sessions.js";
import { sessionAborts } from "./0010-session-aborts.js";
import { handSettlements } from "./0011-hand-settlements.js";
import { chargesNotified } from "./0012-charges-notified.js";

export { ILLEGAL_TRANSITION_SQLSTATE } from "./0001-sessions.js";
export const POSTGRES_SESSION_MIGRATIONS: readonly PostgresMigration[] = [
  sessions,
  historyRows,
  sessionsByCreator,
  effectReservations,
  parkedSessions,
  stepsByTime,
  patrolRuns,
  approvalsByExpiry,
  claimableSessions,
  sessionAborts,
  handSettlements,
  chargesNotified,
];
