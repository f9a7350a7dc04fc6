// How a replica claims sessions and lives through store outages.
import { isTerminal } from "../session-state.js";
import type { SessionEvent } from "../session-store.js";

/** Wait before the `attempt`-th retry after a store outage: doubling from 100 ms up to 5 s, with jitter, so replicas do not retry in step. */
export function storeBackoffMs(attempt: number): number {
  const ceiling = Math.min(5000, 100 * 2 ** Math.min(attempt - 1, 6));
  return Math.round(ceiling * (0.5 + Math.random() / 2));
}

/** Whether an event says a session may be claimed now: live, not waiting for a human, and leased to nobody. */
export function claimable(event: SessionEvent): boolean {
  return event.kind === "resync" || (event.leaseOwner === null && !isTerminal(event.state) && event.state !== "AWAITING_APPROVAL");
}
