// One drill at a time on a cluster. Two at once (one started by hand beside the scheduled one)
// would each take the other's kills and refunds for its own: its fault windows, its audit, its
// report. So a runner holds the namespace's Lease (coordination.k8s.io, DRILL_LEASE) from before its
// first session until its last PodChaos is removed, and refuses to start while another runner holds
// it. The API server's resourceVersion decides between two runners that try at once: one write
// wins, the other gets 409 and reads the winner. A runner that dies frees the cluster once its Lease
// goes unrenewed for LEASE_DURATION_S; a runner that loses its Lease stops its run.
//
// Two pods' clocks may differ. A Lease's renewTime is its holder's clock; a runner whose clock runs
// ahead would see a live Lease as lapsed and start a second drill. So, as client-go's leader election
// does, a runner takes over a Lease only after watching it go unchanged for its duration on its own
// monotonic clock; renewTime is trusted only to refuse at once. Its own lapse is judged on that clock too.
import { setTimeout as sleep } from "node:timers/promises";
import { DRILL_LEASE } from "../../manifests/drill-api-calls.js";
import type { DrillKube, DrillLeaseSpec, StoredLease } from "./cluster-api.js";
import { DrillError } from "./drill-error.js";

/** How long a Lease outlives its last renewal, and how long a runner watches one that looks lapsed before taking it. */
export const LEASE_DURATION_S = 60;
/** Renewals a Lease gets within its duration: three may fail in a row before it lapses. */
const RENEWALS_PER_DURATION = 4;
const TAKE_TRIES = 3;

export interface HeldLease {
  /** Aborts when the Lease is lost: another runner took it, or it went unrenewed past its duration. */
  readonly lost: AbortSignal;
  /** Stops renewing and deletes the Lease, unless another runner holds it by then. */
  release(): Promise<void>;
}

export interface LeaseTiming {
  readonly durationS?: number;
  /** The wall clock written into the Lease (its acquire and renew times). */
  readonly now?: () => Date;
  /** Told once when a Lease that looks lapsed is watched before it is taken over. */
  readonly progress?: (line: string) => void;
  /** Stops the watch of a Lease that looks lapsed (the run was cancelled). */
  readonly signal?: AbortSignal;
}

/** Reads of a Lease being watched within its duration: a live holder renews it RENEWALS_PER_DURATION times. */
const WATCH_READS_PER_DURATION = 12;

/** Whether `lease` is a runner's now: it names a holder and has not gone unrenewed past its duration. */
function heldAt(lease: StoredLease, now: Date): boolean {
  if (!lease.holder || !lease.renewed) return false;
  return lease.renewed.getTime() + (lease.durationS ?? LEASE_DURATION_S) * 1000 > now.getTime();
}

/** Throws DrillError naming the drill that holds `lease` now; nothing when there is none or it lapsed. */
export function refuseWhileHeld(lease: StoredLease | undefined, namespace: string, now = new Date()): void {
  if (lease && heldAt(lease, now)) throw busy(lease, namespace);
}

function busy(lease: StoredLease, namespace: string): DrillError {
  return new DrillError(
    `another drill runs on this cluster: ${lease.holder}, since ${lease.acquired?.toISOString() ?? "?"} ` +
      `(Lease ${namespace}/${DRILL_LEASE}, renewed ${lease.renewed?.toISOString()}). Two drills at once would each ` +
      `take the other's kills and refunds for their own: wait for it to end (kubectl -n ${namespace} get jobs). ` +
      `A runner that died frees the cluster once the next one has watched its Lease go unrenewed for ${lease.durationS ?? LEASE_DURATION_S} s`,
  );
}

/**
 * `lease` once it has gone unchanged for its whole duration on this pod's monotonic clock (or the
 * Lease as it is once released); throws DrillError naming its holder as soon as it is renewed or taken.
 */
async function watchLapsed(
  kube: DrillKube,
  lease: StoredLease & { holder: string },
  namespace: string,
  timing: LeaseTiming,
): Promise<StoredLease | undefined> {
  const durationMs = (lease.durationS ?? LEASE_DURATION_S) * 1000;
  timing.progress?.(
    `Lease ${namespace}/${DRILL_LEASE} of ${lease.holder} was last renewed ${lease.renewed?.toISOString() ?? "never"}, ` +
      `lapsed by this pod's clock, which may run ahead of its holder's: watching it for ${durationMs / 1000} s before taking it over`,
  );
  const since = performance.now();
  for (let watched = 0; ; ) {
    // Cancelled, the run stops with its own reason (e.g. the runner's SIGTERM), not "The operation was aborted".
    await sleep(Math.min(durationMs - watched, durationMs / WATCH_READS_PER_DURATION), undefined, {
      signal: timing.signal,
    }).catch((error: unknown) => {
      throw timing.signal?.aborted ? timing.signal.reason : error;
    });
    // Lapsed only when a read sent after the whole duration still finds it as first seen.
    watched = performance.now() - since;
    const seen = await kube.readLease();
    if (seen?.resourceVersion !== lease.resourceVersion) {
      if (seen?.holder) throw busy(seen, namespace);
      return seen;
    }
    if (watched >= durationMs) return lease;
  }
}

/** Takes the Lease for `runId`, or throws DrillError naming the drill that holds it. */
export async function holdDrillLease(
  kube: DrillKube,
  runId: string,
  namespace: string,
  timing: LeaseTiming = {},
): Promise<HeldLease> {
  const { durationS = LEASE_DURATION_S, now = () => new Date() } = timing;
  let acquired: Date;
  // When this runner's last write was sent, on its monotonic clock: a wall clock stepped back must not stretch it.
  let renewedAtMs: number;
  const spec = (renewed: Date): DrillLeaseSpec => ({ holder: runId, acquired, renewed, durationS });
  let version: string | undefined;
  for (let tries = 0; version === undefined && tries < TAKE_TRIES; tries++) {
    let stored = await kube.readLease();
    refuseWhileHeld(stored, namespace, now());
    if (stored?.holder) stored = await watchLapsed(kube, { ...stored, holder: stored.holder }, namespace, timing);
    acquired = now();
    renewedAtMs = performance.now();
    version = await kube.writeLease(spec(acquired), stored?.resourceVersion);
  }
  if (version === undefined)
    throw new DrillError(
      `Lease ${namespace}/${DRILL_LEASE} changed under each of ${TAKE_TRIES} tries to take it: another drill is starting; try again`,
    );

  const lost = new AbortController();
  const everyMs = (durationS * 1000) / RENEWALS_PER_DURATION;
  let lastError: string | undefined;
  let lapse: NodeJS.Timeout | undefined;
  // Stops the run one renewal before the Lease lapses unless a renewal goes through first: renewals
  // that fail and ones the API never answers alike, as by then another drill may start.
  const armLapse = () => {
    clearTimeout(lapse);
    lapse = setTimeout(
      () =>
        lost.abort(
          new DrillError(
            `the drill could not renew Lease ${namespace}/${DRILL_LEASE} for ${Math.round((performance.now() - renewedAtMs) / 1000)} s (${lastError ?? "no answer"}): stopped before it lapses, as another drill may then start`,
          ),
        ),
      renewedAtMs + durationS * 1000 - everyMs - performance.now(),
    );
  };
  armLapse();
  const renew = async () => {
    const atMs = performance.now();
    try {
      const written = await kube.writeLease(spec(now()), version);
      if (written !== undefined) {
        version = written;
        renewedAtMs = atMs;
        lastError = undefined;
        armLapse();
        return;
      }
      // Changed since this runner's last write: still its own when that write's answer was lost.
      const stored = await kube.readLease();
      if (stored?.holder === runId) version = stored.resourceVersion;
      else
        lost.abort(
          new DrillError(
            `the drill lost Lease ${namespace}/${DRILL_LEASE} (now ${stored?.holder ?? "nobody"}'s): stopped`,
          ),
        );
    } catch (error) {
      lastError = (error as Error).message.split("\n")[0];
    }
  };
  let renewing: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    if (!lost.signal.aborted) renewing = renewing.then(renew);
  }, everyMs);
  return {
    lost: lost.signal,
    async release() {
      clearInterval(timer);
      clearTimeout(lapse);
      // A renewal the API does not answer is not waited for past one interval: the Lease then lapses by itself.
      await Promise.race([renewing, sleep(everyMs, undefined, { ref: false })]);
      if (!lost.signal.aborted && version) await kube.deleteLease(version);
    },
  };
}
