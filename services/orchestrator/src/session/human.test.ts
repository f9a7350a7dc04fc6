import { describe, expect, it } from "vitest";
import type { SessionFollower } from "../store/session-events.js";
import type { SessionRecord, SessionStore } from "../store/session-store.js";
import { ToolRegistry } from "../tool-registry.js";
import { APPROVED } from "./kit.js";
import { cancelSession, expireApprovals, type HumanDeps } from "./human.js";
import type { SessionMoves, StopOptions } from "./moves.js";

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

/** The human's deps, each stop's answer and options kept. */
function humanDeps(s: SessionRecord): { deps: HumanDeps; answers: string[]; options: StopOptions[] } {
  const answers: string[] = [];
  const options: StopOptions[] = [];
  const moves = {
    stop: async (at: SessionRecord, _reason: string, answer: string, stopOptions: StopOptions = {}) => {
      answers.push(answer);
      options.push(stopOptions);
      return { ...at, state: "FAILED" };
    },
  } as unknown as SessionMoves;
  const deps: HumanDeps = { registry: new ToolRegistry(), moves, now: () => NOW, get: async () => s, abort: () => {} };
  return { deps, answers, options };
}

/**
 * A session whose refund a human approved and no run has sent yet (PARKED: its order could not be
 * read again); `unsettled`: a re-send to settle an earlier attempt.
 */
function approvedUnsent(unsettled: boolean, state: "TOOL_EXECUTING" | "PARKED" = "TOOL_EXECUTING"): SessionRecord {
  const effect = { key: "eff_1", tool: "billing_refund", entity: "order", entityId: "ord_1", amount: 1000 };
  const call = { id: "c1", tool: "billing_refund", arguments: "{}", argsHash: "h1", worldVersion: "v1", effect };
  return {
    id: "ses_1",
    state,
    version: 8,
    context: {},
    pending: { queue: [], call, approvedBy: "bob", startedBy: APPROVED, ...(unsettled ? { unsettled } : {}) },
  } as unknown as SessionRecord;
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

  it("an expired approval is kept with the stop, so that its approver's late answer is told it expired", async () => {
    const s = unsettled("AWAITING_APPROVAL");
    const { deps, options } = humanDeps(s);
    await expireApprovals(deps, { expiredApprovals: async () => [s] } as unknown as SessionStore);
    expect(options[0]?.patch?.context).toMatchObject({
      expiredApproval: { approvalId: "apr_1", argumentsHash: "h1", expiresAt: NOW - 1 },
    });
  });
});

describe("a cancel of a call a human approved that no run has sent yet", () => {
  it.each(["TOOL_EXECUTING", "PARKED"] as const)(
    "%s: stops it at once (nothing is in flight), saying it was not made, and lets its money hold go",
    async (state) => {
      const { deps, answers, options } = humanDeps(approvedUnsent(false, state));
      await cancelSession(deps, "ses_1", "customer withdrew", "ops", {} as SessionFollower);
      expect(answers).toEqual(["cancelled by ops: customer withdrew; the approved billing_refund call was not made"]);
      expect(options).toEqual([{ fenced: false, money: { settle: "eff_1", outcome: "released" } }]);
    },
  );

  it("a re-send to settle an earlier attempt: not re-sent, the earlier outcome still unknown, and the hold kept", async () => {
    const { deps, answers, options } = humanDeps(approvedUnsent(true));
    await cancelSession(deps, "ses_1", "customer withdrew", "ops", {} as SessionFollower);
    expect(answers).toEqual([
      "cancelled by ops: customer withdrew; the approved billing_refund call was not re-sent; whether an earlier attempt of billing_refund took effect is unknown: check billing_refund's records",
    ]);
    expect(options).toEqual([{ fenced: false }]);
  });
});
