// Every replica hears of a charge (SessionStore.charge: tokens, price, tool calls or retries added to a
// session's usage without a new version), so that a WatchSession served by any replica pushes the
// new usage. The NOTIFY comes from a trigger, so it is sent exactly when the charge commits, in its
// transaction. Its payload, [id, "charged"], is one that earlier builds' listeners ignore.
import type { PostgresMigration } from "@loopguard/sql-store";
import { CHARGED, SESSIONS_CHANNEL } from "../../store/postgres-notifications.js";

const USAGE_CHARGED =
  "ARRAY[NEW.usage->'tokens', NEW.usage->'costMicros', NEW.usage->'toolCalls', NEW.usage->'retries']";

export const chargesNotified: PostgresMigration = {
  name: "0012-charges-notified",
  // A trigger that only notifies: earlier builds write the table as before and ignore its payload.
  compatibility: "expand",
  async up(db) {
    await db.query(`
      CREATE OR REPLACE FUNCTION loopguard_session_charge_notify() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_notify('${SESSIONS_CHANNEL}', json_build_array(NEW.id, '${CHARGED}')::text);
        RETURN NULL;
      END $$;
      CREATE OR REPLACE TRIGGER sessions_notify_charge AFTER UPDATE OF usage ON sessions
        FOR EACH ROW WHEN (NEW.version = OLD.version AND ${USAGE_CHARGED} IS DISTINCT FROM ${USAGE_CHARGED.replaceAll("NEW.", "OLD.")})
        EXECUTE FUNCTION loopguard_session_charge_notify();`);
  },
};
