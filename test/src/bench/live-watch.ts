// A WatchSession stream on each of many sessions, all on one client (one HTTP/2 connection): when
// each opened (its snapshot), what it waits on, and when its first update past the snapshot came.
import type { OrchestratorService } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import type { RawClient } from "@loopguard/tool-sdk";

export interface Watched {
  readonly id: string;
  readonly kind: "approval" | "model";
  /** The approval the snapshot shows the session waiting on. */
  approval?: { readonly approvalId: string; readonly argumentsHash: string };
  /** The session's version in the snapshot: transitions up to it are its history, replayed. */
  version?: bigint;
  /** When the bench released its wait, and when the first transition past the snapshot arrived (performance.now()). */
  releasedAt?: number;
  updateAt?: number;
}

export interface Watches {
  readonly all: readonly Watched[];
  opened(): number;
  /** Transitions past their snapshot received so far, on all streams. */
  updates(): number;
  /** Those transitions by kind of wait, "from -> to", and reason: what moved before anything was released. */
  moved(): ReadonlyMap<string, number>;
  /** Messages received so far, on all streams: each opens with its snapshot and its history so far. */
  messages(): number;
  /** Why streams ended other than by the session ending or the client closing. */
  failed(): readonly string[];
}

export async function openWatches(
  api: RawClient<typeof OrchestratorService>,
  ids: readonly string[],
  kindOf: (i: number) => Watched["kind"],
): Promise<Watches> {
  let opened = 0;
  let updates = 0;
  let messages = 0;
  const moved = new Map<string, number>();
  const failed: string[] = [];
  const all = ids.map((id, i): Watched => ({ id, kind: kindOf(i) }));
  for (const w of all) {
    void (async () => {
      try {
        for await (const { event } of api.watchSession({ sessionId: w.id })) {
          messages += 1;
          // The snapshot comes once, first: the stream is open. The bench counts moves past it (transitions); an
          // `update` message (a charge, the session as it ended) is no move.
          if (event.case === "snapshot") {
            opened += 1;
            w.version = event.value.version;
            const pending = event.value.pendingApproval;
            if (pending) w.approval = { approvalId: pending.approvalId, argumentsHash: pending.argumentsHash };
          } else if (event.case === "transition" && event.value.version > (w.version ?? 0n)) {
            updates += 1;
            const key = `${w.kind}: ${event.value.from} -> ${event.value.to} (${event.value.reason.slice(0, 80)})`;
            if (w.releasedAt === undefined) moved.set(key, (moved.get(key) ?? 0) + 1);
            w.updateAt ??= performance.now();
          }
        }
      } catch (error) {
        // Closing the client at the end cancels every stream: that is no failure.
        if (!String(error).includes("CANCELLED")) failed.push(String(error));
      }
    })();
  }
  return {
    all,
    opened: () => opened,
    updates: () => updates,
    moved: () => moved,
    messages: () => messages,
    failed: () => failed,
  };
}
