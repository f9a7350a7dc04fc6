// The one LISTEN connection of a PostgreSQL session store: every committed change of a session
// (a charge included), announced by the sessions table's NOTIFY triggers, is told to the store's
// subscribers, whichever replica made it. A lost connection is replaced (with a bounded backoff)
// and LISTENs again; since notifications sent meanwhile are gone, the subscribers are then told to
// read again ("resync"). The connection is checked every few seconds, so a network that silently stopped
// answering is noticed as well as a refused or reset one; each check also keeps the replicas'
// shared clock in step (postgres-clock.ts). The same connection hears the aborts replicas announce
// (a cancel made on one replica stopping the run on another). Each abort is also marked in
// session_aborts, so one sent while the connection was being replaced is not lost: once listening
// again, the aborts marked since the last check that found the connection alive are told again.
import { unpooledClient } from "@loopguard/sql-store";
import { backoffDelayMs } from "@loopguard/tool-sdk";
import type pg from "pg";
import { DatabaseClock } from "./postgres-clock.js";
import { DB_NOW_MS } from "./postgres-session-sql.js";
import { isSessionState } from "../session/session-state.js";
import type { SessionListeners } from "./session-store-support.js";

export const SESSIONS_CHANNEL = "loopguard_sessions";
/** Where a replica announces a run to abort (the payload is the session id); see SessionStore.announceAbort. */
export const ABORTS_CHANNEL = "loopguard_session_aborts";
/** What a charge's notification on SESSIONS_CHANNEL says after the session id (migrations/postgres/0012-charges-notified.ts). */
export const CHARGED = "charged";

/** A mark is kept this long: far beyond any replacement of a listening connection that still holds its leases. */
const ABORT_MARK_KEEP_MS = 3_600_000;
/**
 * Marks the abort of session `$2` and NOTIFYs it on channel `$1`, pruning the marks past keeping (not the one marked:
 * a statement may not change one row twice).
 */
export const ANNOUNCE_ABORT = `WITH pruned AS (DELETE FROM session_aborts WHERE at < ${DB_NOW_MS} - ${ABORT_MARK_KEEP_MS} AND session_id <> $2),
  marked AS (INSERT INTO session_aborts (session_id, at) VALUES ($2, ${DB_NOW_MS})
    ON CONFLICT (session_id) DO UPDATE SET at = EXCLUDED.at RETURNING session_id)
  SELECT pg_notify($1, session_id) FROM marked`;

const RECONNECT_BACKOFF = { baseMs: 100, maxMs: 5000, jitter: "equal" } as const;
/** Aborts marked this long before the last check that found the connection alive are told again too (commit lag). */
const ABORT_REPLAY_MARGIN_MS = 1000;
/** The aborts marked at or after `$1` (database time, ms): those a lost connection may have missed. */
const ABORTS_SINCE = "SELECT session_id FROM session_aborts WHERE at >= $1 ORDER BY at";

export interface NotificationOptions {
  /** How often the connection is checked. */
  readonly checkMs: number;
  /** The shared clock each check measures (see postgres-clock.ts); without it the checks measure a clock of their own. */
  readonly clock?: DatabaseClock | undefined;
}

export class SessionNotifications {
  #client: pg.Client | undefined;
  #closed = false;
  #reconnecting = false;
  /** The database's time when the connection was last found listening. */
  #alive = 0;
  readonly #check: NodeJS.Timeout;
  readonly #clock: DatabaseClock;

  private constructor(
    private readonly config: pg.ClientConfig,
    private readonly listeners: SessionListeners,
    private readonly aborts: ReadonlySet<(id: string) => void>,
    { checkMs, clock }: NotificationOptions,
  ) {
    this.#clock = clock ?? new DatabaseClock();
    this.#check = setInterval(() => void this.#probe(), checkMs);
    this.#check.unref();
  }

  /** Listening once this resolves; a first connection that fails fails the store's open. */
  static async start(
    config: pg.ClientConfig,
    listeners: SessionListeners,
    aborts: ReadonlySet<(id: string) => void>,
    options: NotificationOptions,
  ): Promise<SessionNotifications> {
    const listening = { ...config, application_name: "loopguard-orchestrator-listen", query_timeout: options.checkMs };
    const notifications = new SessionNotifications(listening, listeners, aborts, options);
    try {
      await notifications.#listen();
    } catch (error) {
      await notifications.close();
      throw error;
    }
    return notifications;
  }

  /** Connects and listens; after a lost connection (`missedSince`), tells again the aborts it may have missed. */
  async #listen(missedSince?: number): Promise<void> {
    const client = unpooledClient(this.config);
    client.on("notification", (message) =>
      message.channel === ABORTS_CHANNEL ? this.#aborted(message.payload) : this.#notified(message.payload),
    );
    client.on("error", () => this.#lost(client));
    client.on("end", () => this.#lost(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${SESSIONS_CHANNEL}; LISTEN ${ABORTS_CHANNEL}`);
      this.#alive = await this.#clock.measure(client);
      const missed =
        missedSince === undefined ? [] : (await client.query<{ session_id: string }>(ABORTS_SINCE, [missedSince])).rows;
      for (const { session_id } of missed) this.#aborted(session_id);
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    if (this.#closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.#client = client;
  }

  #notified(payload: string | undefined): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(payload ?? "");
    } catch {
      return;
    }
    if (!Array.isArray(parsed)) return;
    const [id, version, state, leaseOwner] = parsed as unknown[];
    if (typeof id === "string" && version === CHARGED) {
      this.listeners.emit({ kind: "charged", id });
      return;
    }
    if (typeof id !== "string" || typeof version !== "number" || typeof state !== "string" || !isSessionState(state))
      return;
    this.listeners.emit({
      kind: "changed",
      id,
      version,
      state,
      leaseOwner: typeof leaseOwner === "string" ? leaseOwner : null,
    });
  }

  #aborted(id: string | undefined): void {
    if (!id) return;
    for (const listener of this.aborts) {
      try {
        listener(id);
      } catch {
        // A listener's failure is its own; the others still hear the abort.
      }
    }
  }

  async #probe(): Promise<void> {
    const client = this.#client;
    if (!client) return;
    await this.#clock.measure(client).then(
      (at) => {
        if (client === this.#client) this.#alive = at;
      },
      () => this.#lost(client),
    );
  }

  #lost(client: pg.Client): void {
    if (client !== this.#client) return;
    this.#client = undefined;
    client.end().catch(() => undefined);
    void this.#reconnect();
  }

  async #reconnect(): Promise<void> {
    if (this.#reconnecting) return;
    this.#reconnecting = true;
    const missedSince = this.#alive - ABORT_REPLAY_MARGIN_MS;
    let attempt = 0;
    while (!this.#closed) {
      try {
        await this.#listen(missedSince);
        if (!this.#closed) this.listeners.emit({ kind: "resync" });
        break;
      } catch {
        attempt += 1;
        await new Promise((resolve) => setTimeout(resolve, backoffDelayMs(RECONNECT_BACKOFF, attempt)).unref());
      }
    }
    this.#reconnecting = false;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#check);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }
}
