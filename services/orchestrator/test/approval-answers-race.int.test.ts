// Several answers to one approval at once (two approvers, or one approver's double click): one is
// recorded and the others change nothing. None of the others reads the order again or is charged
// for it: the read that checks the world still matches the approval is made once, by the run that
// sends the call, so the session stays within its tool-call budget however many answers race.
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { type CallError, createRawClient } from "@loopguard/tool-sdk";
import { testToken } from "@loopguard/tool-sdk/testing";
import { expect, it } from "vitest";
import { ALL_SCOPES, decisionOn, HIGH_RISK_REFUND, useSuite, waitForSession } from "./harness.js";

const suite = useSuite({ orchestrator: { APPROVAL_TTL_MS: "300000" } });

/** A high-risk refund under a budget of `maxToolCalls`, waiting for its approval. */
async function waitingRefund(maxToolCalls: number) {
  const { session } = await suite.orch.api.startSession({
    goal: "Refund 10.00 of ord_DEMO00000008",
    task: HIGH_RISK_REFUND as never,
    scopes: ALL_SCOPES,
    policy: "scripted",
    budget: { maxToolCalls },
  });
  const id = session!.sessionId;
  const waiting = await waitForSession(suite.orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
  return { id, approval: waiting.pendingApproval! };
}

it("records one of six answers given at once; the others read nothing and the session keeps to its budget", async () => {
  const second = createRawClient(OrchestratorService, suite.orch.server.address, {
    token: await testToken({ subject: "second-approver", scopes: ["sessions:read", "approvals:write"] }),
  });
  suite.onCleanUp(() => second.close());
  // What an approved refund takes, answered once.
  const probe = await waitingRefund(20);
  await suite.orch.approver.resolveApproval(decisionOn(probe.id, probe.approval, true, "checked"));
  const needed = Number((await waitForSession(suite.orch.api, probe.id)).usage!.toolCalls);

  // The same refund with exactly that budget, answered six times at once by two approvers.
  const { id, approval } = await waitingRefund(needed);
  const decision = decisionOn(id, approval, true, "checked");
  const answers = await Promise.all(
    [suite.orch.approver, second, suite.orch.approver, second, suite.orch.approver, second].map((client) =>
      client.resolveApproval(decision).then(
        () => "recorded",
        (error: unknown) => (error as CallError).reason,
      ),
    ),
  );
  expect(answers.filter((a) => a === "recorded")).toHaveLength(1);
  // Overtaken: by the version it read, or, read after the move, a session no longer waiting is not theirs to see.
  expect(answers.filter((a) => a !== "recorded" && a !== "APPROVAL_MISMATCH" && a !== "SESSION_NOT_FOUND")).toEqual([]);
  const done = await waitForSession(suite.orch.api, id);
  expect([SessionState[done.state], done.stopReason]).toEqual(["DONE", "done"]);
  expect(Number(done.usage!.toolCalls)).toBe(needed);
}, 120_000);
