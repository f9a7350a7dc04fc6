// How a replica claims sessions and lives through store outages.
import type { DescService } from "@bufbuild/protobuf";
import { backoffDelayMs, type ToolClient } from "@loopguard/tool-sdk";
import { isTerminal } from "./session-state.js";
import {
  type SessionEvent,
  type SessionRecord,
  type SessionStore,
  StoreUnavailableError,
} from "../store/session-store.js";
import { releasesLease } from "../store/session-store-support.js";

/** Wait before the `attempt`-th retry after a store outage: doubling from 100 ms up to 5 s, with jitter, so replicas do not retry in step. */
export function storeBackoffMs(attempt: number): number {
  return Math.round(backoffDelayMs({ baseMs: 100, maxMs: 5000, jitter: "equal" }, attempt));
}

/** Whether an event says a session may be claimed now: live, not waiting for a human or a tool, and leased to nobody. */
export function claimable(event: SessionEvent): boolean {
  return (
    event.kind === "resync" ||
    (event.leaseOwner === null &&
      !isTerminal(event.state) &&
      event.state !== "AWAITING_APPROVAL" &&
      event.state !== "PARKED")
  );
}

/** A session's run on this replica: how to stop it, and the version it began from (as claimed, created or woken). */
export interface DrivenRun {
  readonly controller: AbortController;
  readonly from: number;
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
    private readonly driven: ReadonlyMap<string, DrivenRun>,
    /** Called with the sessions a pass found no longer held because their lease ran out, after their runs were aborted. */
    private readonly onLost: (ids: readonly string[]) => void = () => undefined,
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
      const gone = new Map<string, DrivenRun>();
      for (const id of ids) {
        const run = this.driven.get(id);
        if (run && !held.has(id)) gone.set(id, run);
      }
      for (const run of gone.values()) run.controller.abort();
      const lost = await this.#ranOut(gone);
      if (lost.length > 0) this.onLost(lost);
    } finally {
      this.#renewing = false;
    }
  }

  /**
   * Of the sessions a renewal did not find held, those whose lease ran out. Not those a move let
   * go: a run's last move (to an end, or to wait for a human or a tool) drops the lease, and it
   * commits a moment before the run is done, so a busy replica's renewals meet such sessions all
   * the time. A lease is lost unless a move of this replica's since its run began let it go;
   * whatever came after that move (a human's approval, another replica's claim) is no loss.
   */
  async #ranOut(gone: ReadonlyMap<string, DrivenRun>): Promise<string[]> {
    const runs = [...gone];
    const lost = await Promise.all(runs.map(([id, run]) => this.#ranOutOf(id, run.from).catch(() => true)));
    return runs.filter((_, i) => lost[i]).map(([id]) => id);
  }

  async #ranOutOf(id: string, from: number): Promise<boolean> {
    const trail = await this.store.auditTrail(id, from);
    return !trail.some((move) => move.owner === this.owner && releasesLease(move.to));
  }
}

/** How often parked sessions that are due are woken; each tick wakes at most a tenth of the rate per second. */
const WAKE_TICK_MS = 100;

export interface WakeOptions {
  readonly store: SessionStore;
  readonly owner: string;
  readonly leaseTtlMs: number;
  /** Parked sessions woken per second at most. */
  readonly perSecond: number;
  readonly clients: ReadonlyMap<string, ToolClient<DescService>>;
  readonly now: () => number;
  /** Slots this replica has free for sessions now. */
  readonly free: () => number;
  readonly drive: (session: SessionRecord) => void;
}

/**
 * Wakes a replica's share of the parked sessions that are due — by their wake time, or because
 * the tool they wait for recovered (its breaker closed here after they parked) — in wake order,
 * at most `perSecond` a second and never more than the free slots, so a tool's recovery is not met
 * by its whole backlog at once. One store query per tick, whatever the number parked; a store
 * outage skips ticks (the claim loop logs it).
 */
export class ParkedWaker {
  readonly #recovered: Record<string, number> = {};
  readonly #unsubscribe: (() => void)[] = [];
  #timer: NodeJS.Timeout | undefined;
  #waking = false;

  constructor(private readonly options: WakeOptions) {}

  start(): void {
    for (const client of this.options.clients.values()) {
      this.#unsubscribe.push(
        client.onBreakerChange((state) => {
          if (state === "closed") this.#recovered[client.tool] = this.options.now();
          else if (state === "open") delete this.#recovered[client.tool];
        }),
      );
    }
    this.#timer = setInterval(() => void this.#tick(), WAKE_TICK_MS);
  }

  stop(): void {
    clearInterval(this.#timer);
    for (const unsubscribe of this.#unsubscribe.splice(0)) unsubscribe();
  }

  async #tick(): Promise<void> {
    const free = this.options.free();
    if (this.#waking || free <= 0) return;
    const perTick = Math.max(1, Math.floor((this.options.perSecond * WAKE_TICK_MS) / 1000));
    this.#waking = true;
    try {
      const woken = await this.options.store.wake(
        this.options.owner,
        this.options.leaseTtlMs,
        Math.min(free, perTick),
        this.#recovered,
      );
      for (const session of woken) this.options.drive(session);
    } catch {
      // A parked session simply wakes on a later tick.
    } finally {
      this.#waking = false;
    }
  }
}
