// The one LISTEN connection of a PostgreSQL session store: every committed change of a session,
// announced by the sessions table's NOTIFY trigger, is told to the store's subscribers, whichever
// replica made it. A lost connection is replaced (with a bounded backoff) and LISTENs again;
// since notifications sent meanwhile are gone, the subscribers are then told to read again
// ("resync"). The connection is checked every few seconds, so a network that silently stopped
// answering is noticed as well as a refused or reset one. The same connection hears the aborts
// replicas announce (a cancel made on one replica stopping the run on another); an abort sent while
// it was being replaced is lost, with nothing to resync: that cancel then waits for the run's own
// next move, as before aborts were announced.
import { backoffDelayMs } from "@loopguard/tool-sdk";
import pg from "pg";
import { isSessionState } from "../session/session-state.js";
import type { SessionListeners } from "./session-store-support.js";

export const SESSIONS_CHANNEL = "loopguard_sessions";
/** Where a replica announces a run to abort (the payload is the session id); see SessionStore.announceAbort. */
export const ABORTS_CHANNEL = "loopguard_session_aborts";

const RECONNECT_BACKOFF = { baseMs: 100, maxMs: 5000, jitter: "equal" } as const;

export class SessionNotifications {
  #client: pg.Client | undefined;
  #closed = false;
  #reconnecting = false;
  readonly #check: NodeJS.Timeout;

  private constructor(
    private readonly config: pg.ClientConfig,
    private readonly listeners: SessionListeners,
    private readonly aborts: ReadonlySet<(id: string) => void>,
    checkMs: number,
  ) {
    this.#check = setInterval(() => void this.#probe(), checkMs);
    this.#check.unref();
  }

  /** Listening once this resolves; a first connection that fails fails the store's open. */
  static async start(
    config: pg.ClientConfig,
    listeners: SessionListeners,
    aborts: ReadonlySet<(id: string) => void>,
    checkMs: number,
  ): Promise<SessionNotifications> {
    const listening = { ...config, application_name: "loopguard-orchestrator-listen", query_timeout: checkMs };
    const notifications = new SessionNotifications(listening, listeners, aborts, checkMs);
    try {
      await notifications.#listen();
    } catch (error) {
      await notifications.close();
      throw error;
    }
    return notifications;
  }

  async #listen(): Promise<void> {
    const client = new pg.Client(this.config);
    client.on("notification", (message) =>
      message.channel === ABORTS_CHANNEL ? this.#aborted(message.payload) : this.#notified(message.payload),
    );
    client.on("error", () => this.#lost(client));
    client.on("end", () => this.#lost(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${SESSIONS_CHANNEL}; LISTEN ${ABORTS_CHANNEL}`);
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
    await client.query("SELECT 1").catch(() => this.#lost(client));
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
    let attempt = 0;
    while (!this.#closed) {
      try {
        await this.#listen();
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
