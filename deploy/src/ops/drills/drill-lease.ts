// One drill at a time on a cluster. Two at once (one started by hand beside the scheduled one)
// would each take the other's kills and refunds for its own: its fault windows, its audit, its
// report. So a runner holds the namespace's Lease (coordination.k8s.io, DRILL_LEASE) from before its
// first session until its last PodChaos is removed, and refuses to start while another runner holds
// it. The API server's resourceVersion decides between two runners that try at once: one write
// wins, the other gets 409 and reads the winner. A runner that dies frees the cluster once its Lease
// goes unrenewed for LEASE_DURATION_S; a runner that loses its Lease stops its run.
import { DRILL_LEASE } from "../../manifests/drill-api-calls.js";
import type { DrillKube, DrillLeaseSpec, StoredLease } from "./cluster-api.js";
import { DrillError } from "./drill-error.js";

/** How long a Lease outlives its last renewal: a runner that died frees the cluster within this. */
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
  readonly now?: () => Date;
}

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
      `A runner that died frees the cluster ${lease.durationS ?? LEASE_DURATION_S} s after its last renewal`,
  );
}

/** Takes the Lease for `runId`, or throws DrillError naming the drill that holds it. */
export async function holdDrillLease(
  kube: DrillKube,
  runId: string,
  namespace: string,
  timing: LeaseTiming = {},
): Promise<HeldLease> {
  const { durationS = LEASE_DURATION_S, now = () => new Date() } = timing;
  const acquired = now();
  const spec = (renewed: Date): DrillLeaseSpec => ({ holder: runId, acquired, renewed, durationS });
  let version: string | undefined;
  for (let tries = 0; version === undefined && tries < TAKE_TRIES; tries++) {
    const stored = await kube.readLease();
    refuseWhileHeld(stored, namespace, now());
    version = await kube.writeLease(spec(acquired), stored?.resourceVersion);
  }
  if (version === undefined)
    throw new DrillError(
      `Lease ${namespace}/${DRILL_LEASE} changed under each of ${TAKE_TRIES} tries to take it: another drill is starting; try again`,
    );

  const lost = new AbortController();
  let renewedAt = acquired;
  const renew = async () => {
    const at = now();
    try {
      const written = await kube.writeLease(spec(at), version);
      if (written !== undefined) {
        version = written;
        renewedAt = at;
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
      // Stopped while the Lease still holds: by the next renewal it may have lapsed, and another drill started.
      const lapses = renewedAt.getTime() + durationS * 1000;
      if (at.getTime() + everyMs >= lapses)
        lost.abort(
          new DrillError(
            `the drill could not renew Lease ${namespace}/${DRILL_LEASE} since ${renewedAt.toISOString()} (${(error as Error).message.split("\n")[0]}): stopped before it lapses, as another drill may then start`,
          ),
        );
    }
  };
  const everyMs = (durationS * 1000) / RENEWALS_PER_DURATION;
  let renewing: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    if (!lost.signal.aborted) renewing = renewing.then(renew);
  }, everyMs);
  return {
    lost: lost.signal,
    async release() {
      clearInterval(timer);
      await renewing;
      if (!lost.signal.aborted && version) await kube.deleteLease(version);
    },
  };
}
