// How a replica claims sessions and lives through store outages.
import { isTerminal } from "../session-state.js";
import { type SessionEvent, type SessionStore, StoreUnavailableError } from "../session-store.js";

/** Wait before the `attempt`-th retry after a store outage: doubling from 100 ms up to 5 s, with jitter, so replicas do not retry in step. */
export function storeBackoffMs(attempt: number): number {
  const ceiling = Math.min(5000, 100 * 2 ** Math.min(attempt - 1, 6));
  return Math.round(ceiling * (0.5 + Math.random() / 2));
}

/** Whether an event says a session may be claimed now: live, not waiting for a human, and leased to nobody. */
export function claimable(event: SessionEvent): boolean {
  return event.kind === "resync" || (event.leaseOwner === null && !isTerminal(event.state) && event.state !== "AWAITING_APPROVAL");
}

/**
 * Keeps the leases of the sessions a replica drives: each pass renews them all in one statement
 * and aborts those no longer held; a pass still waiting on the store is not stacked with another.
 */
export class LeaseKeeper {
  #renewing = false;

  constructor(
    private readonly store: SessionStore,
    private readonly owner: string,
    private readonly ttlMs: number,
    private readonly driven: ReadonlyMap<string, AbortController>,
  ) {}

  async renew(): Promise<void> {
    if (this.#renewing) return;
    this.#renewing = true;
    try {
      const ids = [...this.driven.keys()];
      let held: Set<string>;
      try {
        held = await this.store.renewLeases(ids, this.owner, this.ttlMs);
      } catch (error) {
        // A store that cannot answer says nothing about the leases: the sessions keep them until
        // the store says otherwise, and their transitions stay fenced by the lease meanwhile.
        if (error instanceof StoreUnavailableError) return;
        held = new Set();
      }
      for (const id of ids) if (!held.has(id)) this.driven.get(id)?.abort();
    } finally {
      this.#renewing = false;
    }
  }
}
