// The waits for an approval that a WatchSession stream shows, each once. The stream opens with a
// snapshot (the session now), then replays its transitions from the start before the new ones: a
// wait the snapshot shows comes again as a replayed transition, and answering it twice finds the
// session moved on (the approver may no longer read it: SESSION_NOT_FOUND).
import {
  SessionState,
  type WatchSessionResponse,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";

/** Yields once for each wait for an approval the stream shows: the snapshot's, then each later transition into one. */
export async function* approvalWaits(events: AsyncIterable<WatchSessionResponse>): AsyncGenerator<void> {
  // The snapshot's version: a transition up to it is already in what the snapshot shows.
  let shown = 0n;
  for await (const { event } of events) {
    if (event.case === "snapshot") {
      shown = event.value.version;
      if (event.value.state === SessionState.AWAITING_APPROVAL) yield;
    } else if (
      event.case === "transition" &&
      event.value.version > shown &&
      event.value.to === SessionState.AWAITING_APPROVAL
    ) {
      yield;
    }
  }
}
