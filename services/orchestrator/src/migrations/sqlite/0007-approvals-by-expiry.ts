// Sessions waiting on an approval, by when it expires, so that the approval sweep (every second)
// reads only the expired ones instead of every waiting session's pending JSON.
import type { SqliteMigration } from "@loopguard/sql-store";

export const approvalsByExpiry: SqliteMigration = {
  name: "0007-approvals-by-expiry",
  // An index only: earlier builds read and write the table as before.
  compatibility: "expand",
  up(db) {
    db.exec(
      `CREATE INDEX IF NOT EXISTS sessions_approval_expiry ON sessions (json_extract(pending, '$.approval.expiresAt')) WHERE state = 'AWAITING_APPROVAL';`,
    );
  },
};
