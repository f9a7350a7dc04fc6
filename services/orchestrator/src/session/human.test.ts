import { describe, expect, it } from "vitest";
import type { SessionFollower } from "../store/session-events.js";
import type { SessionRecord, SessionStore } from "../store/session-store.js";
import { ToolRegistry } from "../tool-registry.js";
import { cancelSession, expireApprovals, type HumanDeps } from "./human.js";
import type { SessionMoves } from "./moves.js";

const NOW = Date.UTC(2026, 11, 5);

/** A session waiting on a human to settle a refund whose earlier attempt's outcome is unknown. */
function unsettled(state: "AWAITING_APPROVAL" | "PARKED"): SessionRecord {
  const call = { id: "c1", tool: "billing_refund", arguments: "{}", argsHash: "h1", worldVersion: "v1" };
  const approval = {
    approvalId: "apr_1",
    tool: "billing_refund",
    argumentsHash: "h1",
    worldVersion: "v1",
    reason: "outcome unknown",
    expiresAt: NOW - 1,
    kind: "outcome_unknown" as const,
  };
  return {
    id: "ses_1",
    state,
    version: 7,
    context: {},
    pending: state === "PARKED" ? { queue: [], call, unsettled: true } : { queue: [], call, approval },
  } as unknown as SessionRecord;
}

/** The human's deps, each stop's answer kept. */
function humanDeps(s: SessionRecord): { deps: HumanDeps; answers: string[] } {
  const answers: string[] = [];
  const moves = {
    stop: async (at: SessionRecord, _reason: string, answer: string) => {
      answers.push(answer);
      return { ...at, state: "FAILED" };
    },
  } as unknown as SessionMoves;
  const deps: HumanDeps = { registry: new ToolRegistry(), moves, now: () => NOW, get: async () => s, abort: () => {} };
  return { deps, answers };
}

describe("what a human's stop says of a refund whose outcome is unknown", () => {
  it.each(["AWAITING_APPROVAL", "PARKED"] as const)("a cancel of a session %s says it is unknown", async (state) => {
    const { deps, answers } = humanDeps(unsettled(state));
    await cancelSession(deps, "ses_1", "customer withdrew", "ops", {} as SessionFollower);
    expect(answers).toEqual([
      "cancelled by ops: customer withdrew; whether an earlier attempt of billing_refund took effect is unknown: check billing_refund's records",
    ]);
  });

  it("an expired approval to settle it says it was not re-sent and may have taken effect", async () => {
    const s = unsettled("AWAITING_APPROVAL");
    const { deps, answers } = humanDeps(s);
    const store = { expiredApprovals: async () => [s] } as unknown as SessionStore;
    await expireApprovals(deps, store);
    expect(answers).toEqual([
      "approval apr_1 expired unanswered; billing_refund was not re-sent, and whether its earlier attempt took effect is unknown: check billing_refund's records",
    ]);
  });
});
