// What a release or rollback reports, locally and on Kubernetes: the set it left and the one it
// switched to, when each step happened, and how long each took.
import type { Colour } from "../manifests/release-objects.js";

export type ReleaseKind = "release" | "rollback";

/** Where it ran: the local containers of `pnpm containers`, or the Kubernetes path deployed. */
export type ReleaseTarget = "containers" | "argo-rollouts" | "plain-blue-green";

export interface ReleasedSet {
  /** Blue or green; Argo Rollouts names its sets by pod-template hash instead. */
  readonly colour?: Colour;
  readonly image: string;
  /** Local pods (name@address) or Kubernetes objects of the set. */
  readonly pods: readonly string[];
}

export interface ReleaseTimings {
  /** New set started → every pod SERVING (Ready on Kubernetes). */
  readonly startMs?: number;
  /** The release gate, before and after the flip together: smoke calls and the SLO verdict. */
  readonly gateMs?: number;
  /** Every new pod SERVING (and through the gate) → the tool's name answers the new set only. */
  readonly flipMs?: number;
  /** The flip → no client connection left on the old set (locally), or the scale-down delay (Kubernetes). */
  readonly clientsMovedMs?: number;
  /** SIGTERM of the old set → its pods stopped (in-flight calls finished). */
  readonly drainMs?: number;
  readonly totalMs: number;
}

export interface ReleaseResult {
  readonly tool: string;
  readonly kind: ReleaseKind;
  readonly target: ReleaseTarget;
  readonly dryRun: boolean;
  readonly from: ReleasedSet;
  readonly to: ReleasedSet;
  readonly startedAt: string;
  readonly servingAt?: string;
  /** When the tool's name started answering the new set only. */
  readonly flippedAt?: string;
  readonly clientsMovedAt?: string;
  readonly drainedAt?: string;
  /** Client connections still open on the old set when it was drained (0 unless clients did not re-resolve in time). */
  readonly clientsLeftAtDrain?: number;
  readonly timings: ReleaseTimings;
  /** What the release gate judged, one line each, before the flip (smoke calls only) and after it (the clients' calls too); locally, the smoke calls it sent. */
  readonly gate?: {
    readonly beforeFlip: readonly string[];
    readonly afterFlip?: readonly string[];
    readonly smokeCalls?: number;
  };
}

/** Milliseconds between two ISO times, both given. */
export function between(from: string | undefined, to: string | undefined): number | undefined {
  return from && to ? Date.parse(to) - Date.parse(from) : undefined;
}
