import { create } from "@bufbuild/protobuf";
import {
  SessionState,
  WatchSessionResponseSchema,
  type WatchSessionResponse,
} from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { describe, expect, it } from "vitest";
import { approvalWaits } from "./approval-waits.js";

const snapshot = (state: SessionState, version: bigint): WatchSessionResponse =>
  create(WatchSessionResponseSchema, { event: { case: "snapshot", value: { state, version } } });
const transition = (from: SessionState, to: SessionState, version: bigint): WatchSessionResponse =>
  create(WatchSessionResponseSchema, { event: { case: "transition", value: { from, to, version } } });

async function waitsIn(events: WatchSessionResponse[]): Promise<number> {
  let waits = 0;
  for await (const _ of approvalWaits(
    (async function* () {
      yield* events;
    })(),
  ))
    waits += 1;
  return waits;
}

const { IDLE, THINKING, TOOL_EXECUTING, AWAITING_APPROVAL, DONE } = SessionState;

describe("the waits for an approval a watch shows", () => {
  it("a wait the snapshot shows is answered once, not again when the stream replays its transition", async () => {
    expect(
      await waitsIn([
        snapshot(AWAITING_APPROVAL, 3n),
        transition(IDLE, THINKING, 1n),
        transition(THINKING, TOOL_EXECUTING, 2n),
        transition(TOOL_EXECUTING, AWAITING_APPROVAL, 3n),
        transition(AWAITING_APPROVAL, TOOL_EXECUTING, 4n),
        transition(TOOL_EXECUTING, DONE, 5n),
      ]),
    ).toBe(1);
  });

  it("a wait that begins after the snapshot is answered, and so is a second one later", async () => {
    expect(
      await waitsIn([
        snapshot(THINKING, 1n),
        transition(IDLE, THINKING, 1n),
        transition(THINKING, AWAITING_APPROVAL, 2n),
        transition(AWAITING_APPROVAL, TOOL_EXECUTING, 3n),
        transition(TOOL_EXECUTING, AWAITING_APPROVAL, 4n),
        transition(AWAITING_APPROVAL, DONE, 5n),
      ]),
    ).toBe(2);
  });
});
