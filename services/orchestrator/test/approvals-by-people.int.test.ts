// An approval is one person's decision: a key of another role (a service's, such as one bound as the
// orchestrator's) that carries approvals:write answers none, as a misbound JWKS could let it.
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { refusal } from "@loopguard/test-kit";
import {
  CallError,
  createRawClient,
  mintToken,
  newKeyPair,
  signingKeyFromJwk,
  status,
  withBinding,
} from "@loopguard/tool-sdk";
import { TEST_PUBLIC_KEYS } from "@loopguard/tool-sdk/testing";
import { expect, it } from "vitest";
import { decisionOn, HIGH_RISK_REFUND, ALL_SCOPES, useSuite, waitForSession } from "./harness.js";

const service = newKeyPair("service-approver");
const scopes = ["sessions:read", "approvals:write"];
const jwks = {
  keys: [
    ...TEST_PUBLIC_KEYS.keys,
    withBinding(service.publicJwk, { role: "orchestrator", subject: "session:*", scopes }),
  ],
};
const suite = useSuite({ orchestrator: { LOOPGUARD_JWKS: JSON.stringify(jwks) } });

it("refuses an approval answered with a key that is not a person's, PERMISSION_DENIED, and approves nothing", async () => {
  const { session } = await suite.orch.api.startSession({
    goal: "Refund 10.00 of ord_DEMO00000008",
    task: HIGH_RISK_REFUND as never,
    scopes: ALL_SCOPES,
    policy: "scripted",
  });
  const id = session!.sessionId;
  const waiting = await waitForSession(suite.orch.api, id, (s) => s.state === SessionState.AWAITING_APPROVAL);
  const token = await mintToken(signingKeyFromJwk(service.privateJwk), {
    subject: "session:approver",
    audience: "orchestrator",
    scopes,
    ttlSeconds: 600,
  });
  const api = createRawClient(OrchestratorService, suite.orch.server.address, { token });
  try {
    const error = await refusal(api.resolveApproval(decisionOn(id, waiting.pendingApproval!, true, "ok")), CallError);
    expect([error.code, error.reason]).toEqual([status.PERMISSION_DENIED, "APPROVER_NOT_A_PERSON"]);
  } finally {
    api.close();
  }
  const still = (await suite.orch.api.getSession({ sessionId: id })).session!;
  expect(SessionState[still.state]).toBe("AWAITING_APPROVAL");
  await suite.orch.api.cancelSession({ sessionId: id, reason: "test over" });
});
