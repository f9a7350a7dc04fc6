// People signed in with an OpenID Connect provider, against a real local issuer on loopback
// (oauth2-mock-server: discovery document, JWKS, signed ID tokens) and the orchestrator's real
// gRPC API: a valid ID token starts a session as "oidc:<sub>"; a forged, expired or foreign one is
// UNAUTHENTICATED; an OIDC approver cannot approve the session its own subject started.
import { refusal } from "@loopguard/test-kit";
import { OrchestratorService, SessionState } from "@loopguard/proto/gen/loopguard/orchestrator/v1/orchestrator_pb";
import { CallError, createRawClient, status } from "@loopguard/tool-sdk";
import { decodeJwt, decodeProtectedHeader, generateKeyPair, SignJWT } from "jose";
import { OAuth2Server } from "oauth2-mock-server";
import { describe, expect, it } from "vitest";
import { ALL_SCOPES, HIGH_RISK_CUSTOMER, useSuite, waitForSession } from "./harness.js";

const CLIENT_ID = "loopguard-test";
let issuer: OAuth2Server;
const suite = useSuite({
  orchestrator: async () => {
    issuer = new OAuth2Server();
    await issuer.issuer.keys.generate("RS256");
    await issuer.start(0, "127.0.0.1");
    suite.onCleanUp(() => issuer.stop());
    return { ORCHESTRATOR_OIDC_ISSUER: issuer.issuer.url!, ORCHESTRATOR_OIDC_AUDIENCE: CLIENT_ID };
  },
});

/** An ID token from the local issuer for `sub` holding `roles`; `change` edits its claims before signing. */
function idToken(
  sub: string,
  roles: string[],
  change: (payload: Record<string, unknown>) => void = () => undefined,
  expiresIn = 300,
): Promise<string> {
  return issuer.issuer.buildToken({
    expiresIn,
    scopesOrTransform: (_header, payload) => {
      Object.assign(payload, { sub, aud: CLIENT_ID, loopguard_roles: roles });
      change(payload);
    },
  });
}

function api(token: string) {
  return createRawClient(OrchestratorService, suite.orch.server.address, { token });
}

const question = { goal: "How long do card refunds take?", scopes: ["kb:read"] };

describe("OIDC ID tokens at the orchestrator", () => {
  it("start a session as oidc:<sub> with the scopes of the token's roles", async () => {
    const client = api(await idToken("alice@example.com", ["requester"]));
    try {
      const { session } = await client.startSession(question);
      expect(session?.createdBy).toBe("oidc:alice@example.com");
      expect((await waitForSession(client, session!.sessionId)).state).toBe(SessionState.DONE);
    } finally {
      client.close();
    }
  });

  it("take an ID token whose only audience is the client id, as a list, with azp the client id", async () => {
    const client = api(
      await idToken("alice@example.com", ["requester"], (p) => Object.assign(p, { aud: [CLIENT_ID], azp: CLIENT_ID })),
    );
    try {
      await expect(client.listSessions({})).resolves.toBeDefined();
    } finally {
      client.close();
    }
  });

  it("refuse a forged ID token (another key under the issuer's kid), UNAUTHENTICATED", async () => {
    const genuine = await idToken("mallory", ["requester"]);
    const { privateKey } = await generateKeyPair("RS256");
    const forged = await new SignJWT(decodeJwt(genuine))
      .setProtectedHeader({ alg: "RS256", kid: String(decodeProtectedHeader(genuine).kid), typ: "JWT" })
      .sign(privateKey);
    const client = api(forged);
    try {
      const error = await refusal(client.startSession(question), CallError);
      expect([status[error.code], error.reason]).toEqual(["UNAUTHENTICATED", "CREDENTIALS_INVALID"]);
      expect(error.message).toMatch(/signature does not verify/);
    } finally {
      client.close();
    }
  });

  it("say so when the provider publishes no key the ID token names: not the person's token at fault", async () => {
    const genuine = await idToken("alice@example.com", ["requester"]);
    const { privateKey } = await generateKeyPair("RS256");
    const rotated = await new SignJWT(decodeJwt(genuine))
      .setProtectedHeader({ alg: "RS256", kid: "rotated-away", typ: "JWT" })
      .sign(privateKey);
    const client = api(rotated);
    try {
      const error = await refusal(client.listSessions({}), CallError);
      expect(error.message).toMatch(/publishes no key "rotated-away" for the ID token/);
    } finally {
      client.close();
    }
  });

  it("take an ID token from a provider whose clock runs two seconds ahead", async () => {
    const ahead = Math.floor(Date.now() / 1000) + 2;
    const client = api(
      await idToken("alice@example.com", ["requester"], (p) => Object.assign(p, { iat: ahead, nbf: ahead })),
    );
    try {
      await expect(client.listSessions({})).resolves.toBeDefined();
    } finally {
      client.close();
    }
  });

  it.each([
    ["expired", () => idToken("alice@example.com", ["requester"], () => undefined, -120), /expired/],
    [
      "issued for another client",
      () => idToken("alice@example.com", ["requester"], (p) => (p.aud = "another-app")),
      /another service than the client id loopguard-test/,
    ],
    [
      "issued for another client too (aud lists ours among others)",
      () => idToken("alice@example.com", ["operator"], (p) => (p.aud = ["another-app", CLIENT_ID])),
      /names other audiences than the client id loopguard-test \(another-app\)/,
    ],
    [
      "issued to another party (azp) for our client id",
      () => idToken("alice@example.com", ["operator"], (p) => (p.azp = "another-app")),
      /issued to another client \(azp another-app\)/,
    ],
    [
      "naming no loopguard role",
      () => idToken("alice@example.com", ["admin"]),
      /names no loopguard role: its "loopguard_roles" claim/,
    ],
  ])("refuse an ID token %s, UNAUTHENTICATED", async (_, make, why) => {
    const client = api(await make());
    try {
      const error = await refusal(client.listSessions({}), CallError);
      expect([status[error.code], error.reason]).toEqual(["UNAUTHENTICATED", "CREDENTIALS_INVALID"]);
      expect(error.message).toMatch(why);
    } finally {
      client.close();
    }
  });

  it("refuse an OIDC approver the approval of the session its own subject started; another OIDC approver may", async () => {
    const lead = api(await idToken("lead@example.com", ["requester", "approver"]));
    const approver = api(await idToken("bob@example.com", ["approver"]));
    try {
      const { session } = await lead.startSession({
        goal: "Refund 1.00 of ord_DEMO00000008",
        task: {
          kind: "refund",
          order_id: "ord_DEMO00000008",
          amount_cents: 100,
          reason: "DAMAGED",
          ...HIGH_RISK_CUSTOMER,
        } as never,
        scopes: ALL_SCOPES,
      });
      const waiting = await waitForSession(lead, session!.sessionId, (s) => s.state === SessionState.AWAITING_APPROVAL);
      const answer = {
        sessionId: waiting.sessionId,
        approvalId: waiting.pendingApproval!.approvalId,
        argumentsHash: waiting.pendingApproval!.argumentsHash,
        approve: true,
      };
      const self = await refusal(lead.resolveApproval(answer), CallError);
      expect([status[self.code], self.reason]).toEqual(["PERMISSION_DENIED", "SELF_APPROVAL"]);
      expect((await approver.resolveApproval(answer)).session?.state).not.toBe(SessionState.AWAITING_APPROVAL);
    } finally {
      lead.close();
      approver.close();
    }
  });
});
