import { CallError, status } from "@loopguard/tool-sdk";
import { describe, expect, it } from "vitest";
import type { SessionRecord } from "../store/session-store.js";
import { ToolRegistry } from "../tool-registry.js";
import type { PendingCall } from "./data.js";
import type { Kit } from "./kit.js";
import type { StopOptions } from "./moves.js";
import { type InFlight, observeSent } from "./send.js";

const registry = new ToolRegistry();
const refund = registry.get("billing_refund")!;
const call: PendingCall = {
  id: "c1",
  tool: "billing_refund",
  arguments: "{}",
  argsHash: "h1",
  worldVersion: "v1",
  effect: { key: "lg-key-1", tool: "billing_refund", entity: "order", entityId: "ord_1", amount: 500 },
};

/** What observeSent stopped the session with: its reason and the stop's options. */
async function stopOn(error: CallError, unsettled: boolean): Promise<{ reason: string; options: StopOptions }> {
  let stopped: { reason: string; options: StopOptions } | undefined;
  const kit = {
    deps: { now: () => 0, registry },
    moves: {
      stop: async (s: SessionRecord, reason: string, _answer: string, options: StopOptions = {}) => {
        stopped = { reason, options };
        return s;
      },
    },
  } as unknown as Kit;
  const flight = {
    tool: refund,
    call,
    pending: { queue: [], call, ...(unsettled ? { unsettled } : {}) },
  } as unknown as InFlight;
  await observeSent(kit, {} as SessionRecord, flight, { error, durationMs: 1 });
  return stopped!;
}

const refused = (code: status, reason: string) =>
  new CallError({ code, reason, message: "refused", attempts: 1, tool: "billing", method: "Refund" });

describe("a money call refused for its credential", () => {
  it.each([
    [status.UNAUTHENTICATED, "CREDENTIALS_INVALID", "unrecoverable_error"],
    [status.PERMISSION_DENIED, "CREDENTIAL_NOT_BOUND", "permission_denied"],
  ] as const)("%s: the session stops and the call's hold is let go, as nothing ran", async (code, reason, stop) => {
    expect(await stopOn(refused(code, reason), false)).toEqual({
      reason: stop,
      options: { money: { settle: "lg-key-1", outcome: "released" } },
    });
  });

  it("keeps the hold when an earlier attempt's outcome is unknown: that attempt may have made it", async () => {
    expect((await stopOn(refused(status.UNAUTHENTICATED, "CREDENTIALS_INVALID"), true)).options).toEqual({});
  });
});
