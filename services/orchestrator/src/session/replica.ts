// How a replica claims sessions and lives through store outages.
import { setTimeout as sleep } from "node:timers/promises";
import type { DescService } from "@bufbuild/protobuf";
import { backoffDelayMs, Effect, type ToolClient } from "@loopguard/tool-sdk";
import { isTerminal } from "./session-state.js";
import {
  type SessionEvent,
  type SessionRecord,
  type SessionStore,
  StoreUnavailableError,
} from "../store/session-store.js";
import { releasesLease } from "../store/session-store-support.js";
import type { ToolRegistry } from "../tool-registry.js";

/** Wait before the `attempt`-th retry after a store outage: doubling from 100 ms up to 5 s, with jitter, so replicas do not retry in step. */
export function storeBackoffMs(attempt: number): number {
  return Math.round(backoffDelayMs({ baseMs: 100, maxMs: 5000, jitter: "equal" }, attempt));
}

/** Whether an event says a session may be claimed now: live, not waiting for a human or a tool, and leased to nobody. */
export function claimable(event: SessionEvent): boolean {
  return (
    event.kind === "resync" ||
    (event.kind === "changed" &&
      event.leaseOwner === null &&
      !isTerminal(event.state) &&
      event.state !== "AWAITING_APPROVAL" &&
      event.state !== "PARKED")
  );
}

/** A session's run on this replica: how to stop it, and the version it began from (as claimed, created or woken). */
export interface DrivenRun {
  readonly controller: AbortController;
  readonly from: number;
  /**
   * A renewal found its lease gone (ran out, or let go by a move): the run was aborted and never
   * holds that lease again, so later renewals skip it, and a lease lost is counted once, however
   * long the aborted run still takes to end (an irreversible call is never cut off).
   */
  leaseGone?: boolean;
}

/** Leases up to `slots` sessions (a claim, a wake). */
export type Take = (slots: number) => Promise<readonly SessionRecord[]>;

/**
 * A replica's ORCHESTRATOR_MAX_ACTIVE_SESSIONS slots: one count for the three ways it takes
 * sessions (a StartSession creating one leased to it, a claim, a wake of parked ones). A slot is
 * taken by a run, by a session being created leased, or held for a claim or a wake while it waits
 * on the store, so that none of the others counts it free meanwhile.
 */
export class Slots {
  #starting = 0;
  #claiming = 0;
  #filling = 0;
  #closed = false;

  constructor(
    private readonly max: number,
    private readonly running: ReadonlyMap<string, DrivenRun>,
  ) {}

  /** Slots nothing holds; none once closed (the replica stops). */
  free(): number {
    return this.#closed ? 0 : this.max - this.running.size - this.#starting - this.#claiming;
  }

  close(): void {
    this.#closed = true;
  }

  /**
   * Resolves once no run is left and no claim or wake is under way, or once the longest irreversible call may take
   * has passed (its SLA timeout + 1 s, 5 s at least): a stop does not cut such a call off, it finishes and is recorded.
   */
  async drained(registry: ToolRegistry): Promise<void> {
    const irreversible = registry.list().filter((t) => t.effect === Effect.IRREVERSIBLE_EXTERNAL);
    const deadline = Date.now() + Math.max(5000, ...irreversible.map((t) => t.timeoutMs + 1000));
    while ((this.running.size > 0 || this.filling) && Date.now() < deadline) await sleep(20);
  }

  /** Whether a claim or a wake is under way: what it took is not yet driven or let go. */
  get filling(): boolean {
    return this.#filling > 0;
  }

  /** Runs `create`, leased when a slot is free: held for it until `create` answered and `then` ran. */
  async start<T>(create: (leased: boolean) => Promise<T>, then: (result: T, leased: boolean) => void): Promise<T> {
    const leased = this.free() > 0;
    if (leased) this.#starting += 1;
    try {
      const result = await create(leased);
      then(result, leased);
      return result;
    } finally {
      if (leased) this.#starting -= 1;
    }
  }

  /**
   * Leases up to `most` sessions through `take` into free slots, held while it waits on the store;
   * those it did not fill are free again after. Each session taken goes to `drive` while a slot is
   * free (or it runs here already: it takes no new one); one beyond the slots (the replica began to
   * stop meanwhile) to `letGo`, at once. Returns what `drive` returned.
   */
  async fill<R>(
    most: number,
    take: Take,
    drive: (s: SessionRecord) => R,
    letGo: (s: SessionRecord) => Promise<void>,
  ): Promise<R[]> {
    const slots = Math.min(most, this.free());
    if (slots <= 0) return [];
    this.#claiming += slots;
    this.#filling += 1;
    try {
      let taken: readonly SessionRecord[];
      try {
        taken = await take(slots);
      } finally {
        this.#claiming -= slots;
      }
      const driven: R[] = [];
      const beyond: SessionRecord[] = [];
      for (const session of taken) {
        if (this.running.has(session.id) || this.free() > 0) driven.push(drive(session));
        else beyond.push(session);
      }
      await Promise.all(beyond.map(letGo));
      return driven;
    } finally {
      this.#filling -= 1;
    }
  }
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
      const ids = [...this.driven].filter(([, run]) => !run.leaseGone).map(([id]) => id);
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
      for (const run of gone.values()) {
        run.leaseGone = true;
        run.controller.abort();
      }
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
  /**
   * Drives what `take` wakes, up to `most` sessions and never more than the replica's free slots,
   * held for it while `take` waits on the store (see Slots.fill).
   */
  readonly fill: (most: number, take: Take) => Promise<unknown>;
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
    if (this.#waking) return;
    const perTick = Math.max(1, Math.floor((this.options.perSecond * WAKE_TICK_MS) / 1000));
    const { store, owner, leaseTtlMs } = this.options;
    this.#waking = true;
    try {
      await this.options.fill(perTick, (slots) => store.wake(owner, leaseTtlMs, slots, this.#recovered));
    } catch {
      // A parked session simply wakes on a later tick.
    } finally {
      this.#waking = false;
    }
  }
}
