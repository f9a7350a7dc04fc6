// Sessions waiting on an approval, by when it expires, so that the approval sweep (every second)
// reads only the expired ones instead of every waiting session's pending JSON.
import type { PostgresMigration } from "@loopguard/sql-store";

export const approvalsByExpiry: PostgresMigration = {
  name: "0008-approvals-by-expiry",
  // An index only: earlier builds read and write the table as before.
  compatibility: "expand",
  async up(db) {
    await db.query(
      `CREATE INDEX IF NOT EXISTS sessions_approval_expiry ON sessions (((pending->'approval'->>'expiresAt')::numeric)) WHERE state = 'AWAITING_APPROVAL';`,
    );
  },
};
