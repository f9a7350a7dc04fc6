// A session that keeps losing the replica running it — every replica that runs it crashes, is killed
// or stalls past its lease — is stopped once it was taken over more than `maxTakeovers` times
// (Usage.takeovers, counted by the claim that takes it), so one poisonous session cannot take a
// fleet down replica by replica until its wall clock runs out. A call in flight that may have
// changed something is settled first (sent again with its key, its answer observed), so the stop's
// answer names what was done.
import { Effect } from "@loopguard/tool-sdk";
import type { SessionRecord } from "../store/session-store.js";
import { alreadyDone, pendingOf } from "./data.js";
import type { Kit } from "./kit.js";

/** Takeovers a session may have unless ORCHESTRATOR_MAX_TAKEOVERS says otherwise. */
export const DEFAULT_MAX_TAKEOVERS = 3;

/** The session was taken over too often, and no call of it that may have changed something waits for its outcome. */
export function takenOverTooOften(kit: Kit, s: SessionRecord): boolean {
  if ((s.usage.takeovers ?? 0) <= maxTakeovers(kit)) return false;
  const call = pendingOf(s).call;
  return call === undefined || kit.deps.registry.get(call.tool)?.effect === Effect.READ_ONLY;
}

export function stopTakenOver(kit: Kit, s: SessionRecord): Promise<SessionRecord> {
  return kit.moves.stop(
    s,
    "unrecoverable_error",
    `stopped after ${s.usage.takeovers} takeovers (at most ${maxTakeovers(kit)}): each replica that ran it stopped without handing it back (a crash, a kill, or a stall past its lease)${alreadyDone(s, kit.deps.registry)}`,
  );
}

function maxTakeovers(kit: Kit): number {
  return kit.deps.maxTakeovers ?? DEFAULT_MAX_TAKEOVERS;
}
